// The retention rule (RetentionPolicy, store.h), once for every caller: a
// store's own prune, the CLI's prune preview, and DistributedCheckpointer's
// retention over global steps.
#pragma once

#include <cstdint>
#include <vector>

#include "trainsnap/store.h"

namespace trainsnap::internal {

// The steps of `steps` (ascending) that `policy` does not keep, ascending:
// every step but the keep_last highest and the multiples of keep_every
// (keep_every = 0: none). keep_last = 0 keeps everything; with keep_last >= 1
// the highest step is always kept.
std::vector<int64_t> StepsOutsidePolicy(const std::vector<int64_t>& steps, const RetentionPolicy& policy);

}  // namespace trainsnap::internal
