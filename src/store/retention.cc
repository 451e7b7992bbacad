#include "store/retention.h"

namespace trainsnap::internal {

std::vector<int64_t> StepsOutsidePolicy(const std::vector<int64_t>& steps, const RetentionPolicy& policy) {
  std::vector<int64_t> out;
  if (policy.keep_last <= 0 || steps.size() <= static_cast<size_t>(policy.keep_last)) return out;
  const size_t keep_from = steps.size() - static_cast<size_t>(policy.keep_last);
  for (size_t i = 0; i < keep_from; ++i) {
    if (policy.keep_every > 0 && steps[i] % policy.keep_every == 0) continue;
    out.push_back(steps[i]);
  }
  return out;
}

}  // namespace trainsnap::internal
