// Apply, the last phase of a restore: copy the validated, decoded snapshot
// into the live objects. The extras load first (LoadExtras: the last step
// that can fail, and the only one that can be undone); WritePlan then
// cannot fail.
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
// WritePlan cannot fail.
Status CheckWritable(const RestorePlan& plan);

// The extras' state from before LoadExtras loaded them, to give it back
// when the restore does not go on.
class ExtrasUndo {
 public:
  ExtrasUndo() = default;
  ExtrasUndo(ExtrasUndo&&) = default;
  ExtrasUndo& operator=(ExtrasUndo&&) = default;
  // Loads every extra's previous state, in order, once; later calls return
  // OK. Aborted naming each extra that refused its previous state (the
  // others got theirs back); OK otherwise.
  Status Undo();

 private:
  friend Status LoadExtras(RestorePlan& plan, ExtrasUndo* undo);
  struct Previous {
    RestorePlan::Extra* item = nullptr;
    std::string bytes;
    TensorState tensor_state;
  };
  std::vector<Previous> previous_;
};

// Saves every extra's previous state (a TensorStateful that fails to save
// fails the restore, nothing loaded yet), then loads the plan's extra state.
// When one refuses (or throws), the ones already loaded get their previous
// state back and its error is returned, naming it (Aborted when an undo
// failed too). On success `undo` can give them all their previous state
// back; `plan` must outlive it.
Status LoadExtras(RestorePlan& plan, ExtrasUndo* undo);

// Copies tensors, gradients, optimizer state, scheduler, window and RNG in
// under NoGradGuard. Cannot fail once CheckWritable passed (an allocation
// may still throw: a replaced gradient).
void WritePlan(RestorePlan& plan);

}  // namespace trainsnap::internal
