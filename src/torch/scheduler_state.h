// Access to torch::optim::LRScheduler's step count, which LibTorch keeps
// protected. Everything else a scheduler holds is constructor arguments or
// lives in the optimizer's param-group options (captured with the optimizer).
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace trainsnap::internal {

uint64_t SchedulerStepCount(const torch::optim::LRScheduler& scheduler);
void SetSchedulerStepCount(torch::optim::LRScheduler& scheduler, uint64_t step_count);

}  // namespace trainsnap::internal
