// The state of user objects a snapshot carries besides models and
// optimizers (TrainingState::extras, tensor_extras): Stateful (bytes) and
// TensorStateful (named tensors). Included by checkpointer.h.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include <torch/torch.h>

#include "trainsnap/export.h"
#include "trainsnap/status.h"

namespace trainsnap {

// Any object whose state must survive a restart: a data-loader cursor, a
// custom scheduler, ... LoadState returns an error rather than throwing; an
// exception of any type from either call fails the capture/restore (Aborted).
class TRAINSNAP_EXPORT Stateful {
 public:
  virtual ~Stateful() = default;
  virtual std::string SaveState() const = 0;
  virtual Status LoadState(std::string_view bytes) = 0;
};

// What a TensorStateful saves and loads. `type` and `bytes` are stored in the
// manifest (`trainsnap show` prints the type); each tensor is stored like a
// model tensor (chunked, deduplicated, compressed).
struct TRAINSNAP_EXPORT TensorState {
  std::string type;                               // e.g. "torch.optim.adamw.AdamW"
  std::string bytes;                              // opaque to trainsnap
  std::map<std::string, torch::Tensor> tensors;   // dense, any device
};

// State that holds tensors, of an object with no built-in adapter (the
// Python binding's optimizers, schedulers and extras). SaveState runs on the
// capturing thread; its tensors are staged (copied) before CaptureAsync
// returns. LoadState runs once the snapshot is validated and decoded, before
// any model tensor is written: `state.tensors` are fresh host tensors with
// the saved names, shapes and dtypes (those under 4 KiB share larger buffers:
// keep them as they are or copy them, but do not resize them). An error (or exception: Aborted) from
// LoadState fails the restore, and the extras already loaded get their
// previous state back (SaveState, taken before the first load).
class TRAINSNAP_EXPORT TensorStateful {
 public:
  virtual ~TensorStateful() = default;
  virtual Status SaveState(TensorState* state) const = 0;
  virtual Status LoadState(TensorState state) = 0;
};

}  // namespace trainsnap
