#include "distributed/run_dir_deletion.h"

#include <filesystem>
#include <system_error>

#include "distributed/run_dir.h"

namespace trainsnap::internal {

int CountRankStores(const std::string& run_dir, int from) {
  int count = from;
  std::error_code ec;
  while (std::filesystem::is_directory(RankStorePath(run_dir, count), ec)) ++count;
  return count;
}

Status DeleteGlobalSteps(Store& global, const std::vector<int64_t>& steps, size_t* deleted) {
  if (deleted != nullptr) *deleted = 0;
  for (int64_t step : steps) {
    TRAINSNAP_ASSIGN_OR_RETURN(bool held, global.Contains(step));
    if (held) {
      TRAINSNAP_RETURN_IF_ERROR(global.Delete(step).WithContext("global store: delete step " + std::to_string(step)));
    }
    if (deleted != nullptr) ++*deleted;
  }
  return Status::OK();
}

Status RollbackGlobalSteps(Store& global, int64_t step) { return global.Rollback(step).WithContext("global store"); }

Status DeleteRankSnapshots(Store& rank, const std::vector<int64_t>& steps) {
  for (int64_t step : steps) {
    Result<bool> held = rank.Contains(step);
    if (!held.ok()) return held.status().WithContext(rank.path());
    if (!*held) continue;
    TRAINSNAP_RETURN_IF_ERROR(rank.Delete(step).WithContext(rank.path() + ": delete step " + std::to_string(step)));
  }
  return Status::OK();
}

Status DeleteRankSnapshotsAfter(Store& rank, int64_t step) {
  Result<bool> held = rank.Contains(step);
  if (!held.ok()) return held.status().WithContext(rank.path());
  if (*held) return rank.Rollback(step).WithContext(rank.path());
  Result<std::vector<SnapshotInfo>> listed = rank.List();
  if (!listed.ok()) return listed.status().WithContext("list " + rank.path());
  std::vector<int64_t> later;
  for (const SnapshotInfo& info : *listed) {
    if (info.step > step) later.push_back(info.step);
  }
  return DeleteRankSnapshots(rank, later);
}

Result<std::vector<int64_t>> LocalOnlySteps(Store& rank, const std::set<int64_t>& global) {
  Result<std::vector<SnapshotInfo>> listed = rank.List();
  if (!listed.ok()) return listed.status().WithContext("list " + rank.path());
  std::vector<int64_t> steps;
  for (const SnapshotInfo& info : *listed) {
    if (!global.count(info.step)) steps.push_back(info.step);
  }
  return steps;
}

}  // namespace trainsnap::internal
