#include "cli/retention_plan.h"

#include <cstring>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace trainsnap::cli {

namespace {
struct ChunkHashHasher {
  size_t operator()(const ChunkHash& h) const {
    size_t v;  // the hash is uniformly distributed already
    std::memcpy(&v, h.bytes.data(), sizeof(v));
    return v;
  }
};
}  // namespace

Result<DeletionPlan> PlanDeletion(Store& store, const std::vector<int64_t>& steps) {
  std::set<int64_t> doomed(steps.begin(), steps.end());
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<SnapshotInfo> all, store.List());
  DeletionPlan plan;
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> candidates;
  std::unordered_set<ChunkHash, ChunkHashHasher> live;
  for (const SnapshotInfo& info : all) {
    bool deleting = doomed.count(info.step) > 0;
    if (deleting) {
      plan.deleted.push_back(info);
    } else {
      ++plan.kept;
    }
    auto records = store.Tensors(info.step);
    if (!records.ok()) return records.status().WithContext("step " + std::to_string(info.step));
    for (const TensorRecord& record : *records) {
      for (const ChunkRef& chunk : record.chunks) {
        if (deleting) {
          candidates.emplace(chunk.hash, chunk.stored_bytes);
        } else {
          live.insert(chunk.hash);
        }
      }
    }
  }
  if (plan.deleted.size() != doomed.size()) {
    for (int64_t step : doomed) {
      bool found = false;
      for (const auto& info : plan.deleted) found = found || info.step == step;
      if (!found) return Status::NotFound("step " + std::to_string(step) + " not found in store `" + store.path() + "`");
    }
  }
  for (const auto& [hash, stored] : candidates) {
    if (live.count(hash) > 0) continue;
    ++plan.reclaimable_chunks;
    plan.reclaimable_bytes += stored;
  }
  return plan;
}

std::vector<int64_t> StepsOutsidePolicy(const std::vector<int64_t>& steps, const RetentionPolicy& policy) {
  std::vector<int64_t> out;
  if (policy.keep_last <= 0) return out;
  size_t keep_from = steps.size() > static_cast<size_t>(policy.keep_last)
                         ? steps.size() - static_cast<size_t>(policy.keep_last)
                         : 0;
  for (size_t i = 0; i < keep_from; ++i) {
    if (policy.keep_every > 0 && steps[i] % policy.keep_every == 0) continue;
    out.push_back(steps[i]);
  }
  return out;
}

}  // namespace trainsnap::cli
