#include "cli/retention_plan.h"

#include <set>
#include <string>

#include "trainsnap/gc_plan.h"

namespace trainsnap::cli {

Result<DeletionPlan> PlanDeletion(Store& store, const std::vector<int64_t>& steps) {
  const std::set<int64_t> doomed(steps.begin(), steps.end());
  auto all = store.List();
  if (!all.ok()) return all.status().WithContext("list snapshots");
  DeletionPlan plan;
  for (const SnapshotInfo& info : *all) {
    if (doomed.count(info.step) > 0) {
      plan.deleted.push_back(info);
    } else {
      ++plan.kept;
    }
  }
  if (plan.deleted.size() != doomed.size()) {
    std::set<int64_t> listed;
    for (const SnapshotInfo& info : plan.deleted) listed.insert(info.step);
    for (int64_t step : doomed) {
      if (listed.count(step) == 0) {
        return Status::NotFound("step " + std::to_string(step) + " not found in store `" + store.path() + "`");
      }
    }
  }
  // The store decides what the collection frees with the collection's own
  // rule: a chunk a kept snapshot uses as a delta base is not freed.
  auto gc = PlanCollection(store, steps);
  if (!gc.ok()) return gc.status();
  plan.reclaimable_chunks = gc->chunks_freed;
  plan.reclaimable_bytes = gc->bytes_freed;
  plan.unreferenced_chunks = gc->chunks_unreferenced;
  plan.unreferenced_bytes = gc->bytes_unreferenced;
  return plan;
}

}  // namespace trainsnap::cli
