// DropSnapshots: a store's snapshots of given steps deleted together with
// the chunks only they referenced, as a store's own retention does after a
// commit: no scan of the chunk index, and space given back (packs
// compacted) only once the deleted bytes reach a quarter of the live ones.
// What DistributedCheckpointer's retention does to each rank store (the
// rank stores have no retention of their own: global steps decide).
#pragma once

#include <cstdint>
#include <vector>

#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

// Deletes the snapshots of `steps` that `store` (writable, from Store::Open)
// holds, in one batch, and the chunks and delta bases that only they
// referenced; steps it does not hold are skipped. PruneReport::deleted_steps
// lists the steps deleted, gc what was collected (and, when space was given
// back, the packs removed). Errors: those of Store::Delete; Corruption
// while the store's lost commits are unacknowledged (nothing deleted, as
// CollectGarbage); NotSupported for a Store of another kind; NoSpace
// without using the store's reserve (Delete and CollectGarbage do). A
// failure after the steps' deletion leaves their chunks as garbage, which
// CollectGarbage removes.
Result<PruneReport> DropSnapshots(Store& store, const std::vector<int64_t>& steps);

}  // namespace trainsnap::internal
