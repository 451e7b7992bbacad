// Apply, the last phase of a restore: copy the validated, decoded snapshot
// into the live objects. Everything that can fail has been checked before.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "torch/rng_state.h"
#include "manifest.pb.h"
#include "restore/optimizer_restore.h"
#include "trainsnap/checkpointer.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

// What a restore will write, fully prepared.
struct RestorePlan {
  struct Copy {
    torch::Tensor live;    // a parameter or buffer of the target
    torch::Tensor staged;  // decoded value, same shape and dtype
    // For errors, "parameter `x`" or "buffer `y`": built on failure only
    // (a heap string per tensor otherwise). `name` outlives the plan.
    const char* kind = "parameter";
    const std::string* name = nullptr;
    std::string What() const { return std::string(kind) + " `" + *name + "`"; }
  };
  struct Grad {
    torch::Tensor param;
    proto::GradState state = proto::GRAD_UNDEFINED;
    torch::Tensor staged;  // GRAD_STORED only, on the parameter's device
  };
  // One of `target` (bytes) or `tensor_target` (tensor_state).
  struct Extra {
    std::string name;
    Stateful* target = nullptr;
    std::string bytes;
    TensorStateful* tensor_target = nullptr;
    TensorState tensor_state;  // decoded tensors on the host
  };
  std::vector<Copy> copies;
  std::vector<Grad> grads;
  std::vector<PreparedOptimizer> optimizers;
  torch::optim::LRScheduler* scheduler = nullptr;
  uint64_t scheduler_step_count = 0;
  AccumulationWindow* accumulation = nullptr;
  AccumulationWindow window;
  std::optional<PreparedRng> rng;
  std::vector<Extra> extra;
};

// InvalidArgument (NotSupported for a non-strided layout) naming the first
// live tensor of `plan.copies` that an in-place copy would refuse: an
// inference tensor outside c10::InferenceMode, a tensor whose elements
// overlap in memory (stride 0, expand()). Touches nothing. After it passed,
// ApplyPlan's tensor writes cannot fail.
Status CheckWritable(const RestorePlan& plan);

// Checks CheckWritable, then saves every extra's previous state (a
// TensorStateful that fails to save fails the restore, nothing loaded yet)
// and loads the extra state: when one refuses (or throws), the ones already
// loaded get their previous state back and the error is returned with
// nothing else touched. Then copies
// tensors, gradients, optimizer state, scheduler, window and RNG under
// NoGradGuard; none of these can fail.
Status ApplyPlan(RestorePlan& plan);

}  // namespace trainsnap::internal
