// A preview of garbage collection after a deletion, for tools such as the
// CLI's --dry-run: exactly what Store::CollectGarbage would delete, computed
// without changing the store.
#pragma once

#include <cstdint>
#include <vector>

#include "trainsnap/export.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap {

// What deleting the snapshots `steps` of `store`, then collecting garbage,
// would free, decided by CollectGarbage's own rule (references and delta
// bases): with no writer in between, the collection deletes
// chunks_freed + chunks_unreferenced chunks of bytes_freed +
// bytes_unreferenced bytes. Changes nothing; works on read-only stores.
// NotFound if a step is not stored; NotSupported for a Store not opened by
// Store::Open / Store::OpenReadOnly. The same as store.PlanCollection().
TRAINSNAP_EXPORT Result<GcPlan> PlanCollection(Store& store, const std::vector<int64_t>& steps, const ProgressFn& progress = {});

}  // namespace trainsnap
