// What a capture takes and a restore writes: TrainingState, the non-owning
// views of the live training objects, with the accumulation window and the
// choices of which module tensors and gradients a snapshot holds. Included by
// checkpointer.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <torch/torch.h>

#include "trainsnap/export.h"
#include "trainsnap/stateful.h"

namespace trainsnap {

// Where a gradient-accumulation window stands. Snapshots taken mid-window
// restore it together with the pending gradients.
struct TRAINSNAP_EXPORT AccumulationWindow {
  int64_t micro_step = 0;   // micro-steps already accumulated in this window
  int64_t size = 1;         // micro-steps per optimizer step
  double weight_sum = 0.0;  // sum of the weights of the accumulated micro-steps
  double scale = 1.0;       // the loss scale in use
};

// Which module tensors a snapshot holds besides optimizer state and gradients.
enum class ModelState {
  // Parameters with requires_grad only (LoRA: the adapters). Opt-out of the
  // default: a resume is bit-exact only if no buffer changes during training
  // (no BatchNorm in training mode). Restoring such a snapshot into a model
  // with buffers needs RestoreOptions::allow_missing_buffers.
  kTrainable,
  kTrainableAndBuffers,  // plus every buffer (BatchNorm statistics, ...): the default
  kFull,                 // every parameter and buffer, frozen ones included
};

// Which pending gradients (.grad() of trainable parameters) a snapshot holds.
enum class Gradients {
  // Only where they carry state: in the middle of an accumulation window
  // (TrainingState::accumulation with micro_step != 0), or always when no
  // window is given. At a window boundary they are omitted: the next window
  // starts by zeroing them.
  kAuto,
  kAlways,  // every non-zero gradient is stored
  // None: for loops that zero the gradients before every backward (a GAN,
  // one optimizer step per batch without accumulation).
  kNever,
};

// Non-owning views of the live training objects. Every pointer may be null.
// The named maps hold extra models/optimizers (a GAN's G and D, a frozen
// teacher); their parameter IDs are qualified by the map key.
struct TRAINSNAP_EXPORT TrainingState {
  torch::nn::Module* model = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  torch::optim::LRScheduler* scheduler = nullptr;
  AccumulationWindow* accumulation = nullptr;
  bool rng = true;                          // torch's default generators
  std::map<std::string, Stateful*> extra;   // data-loader cursor, custom schedulers, ...
  // Extra state with tensors; keys share extra's namespace; one in both, or with a '/', is InvalidArgument.
  std::map<std::string, TensorStateful*> tensor_extra;
  std::map<std::string, torch::nn::Module*> models;
  std::map<std::string, torch::optim::Optimizer*> optimizers;
};

}  // namespace trainsnap
