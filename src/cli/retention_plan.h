// What a deletion (rollback, delete, prune) would remove, computed without
// changing the store: for previews (--dry-run, the confirmation prompt).
#pragma once

#include <cstdint>
#include <vector>

#include "trainsnap/store.h"

namespace trainsnap::cli {

struct DeletionPlan {
  std::vector<SnapshotInfo> deleted;  // ascending step
  uint64_t kept = 0;                  // snapshots left afterwards
  // Chunks the deleted snapshots need (reference, or use as a delta base) and
  // the kept ones do not: what the deletion frees (trainsnap::PlanCollection, gc_plan.h).
  uint64_t reclaimable_chunks = 0;
  uint64_t reclaimable_bytes = 0;  // their encoded (stored) bytes
  // Chunks no snapshot needs already; the garbage collection after the
  // deletion frees them too. It reclaims exactly reclaimable_bytes +
  // unreferenced_bytes when no writer changes the store in between.
  uint64_t unreferenced_chunks = 0;
  uint64_t unreferenced_bytes = 0;
};

// `steps` must name existing snapshots, each once (NotFound otherwise).
Result<DeletionPlan> PlanDeletion(Store& store, const std::vector<int64_t>& steps);

}  // namespace trainsnap::cli
