// The training state of the crash test: a small model and its Adam optimizer
// whose every byte is a pure function of the step, so that the parent process
// can recompute what the killed child captured and compare bit for bit.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

namespace trainsnap::testing {

struct CrashState {
  torch::nn::Sequential model{nullptr};
  std::unique_ptr<torch::optim::Adam> optimizer;
};

// Builds the model and optimizer as they are at `step`: parameters drawn from
// seed `step`, one Adam step taken, then gradients of a second batch left
// pending (as in the middle of an accumulation window).
CrashState MakeCrashState(int64_t step);

// Empty string when `got` (restored) equals `want` bitwise: parameters,
// gradients and every Adam state tensor; else the first difference.
std::string CompareCrashStates(const CrashState& got, const CrashState& want);

}  // namespace trainsnap::testing
