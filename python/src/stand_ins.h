// Stand-ins for a partial restore. The C++ restore checks a target against
// the whole composition of a snapshot; a partial restore gives it, for every
// part the caller left out, an object that accepts that part's state and
// drops it, so that only the parts given are changed.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "trainsnap/checkpointer.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::python {

// The stand-ins of one restore; they must outlive it.
struct StandIns {
  std::vector<std::shared_ptr<torch::nn::Module>> models;
  std::vector<std::unique_ptr<Stateful>> extras;
  std::vector<std::unique_ptr<TensorStateful>> tensor_extras;
  std::unique_ptr<AccumulationWindow> accumulation;
};

// Reads snapshot `step` of `store` and adds to `target` a stand-in for each
// model, extra (plain or with tensors) and accumulation window the snapshot
// holds and `target` lacks. A stand-in model holds fresh tensors of the
// stored names, shapes and dtypes (its trainable parameters and buffers are
// read from the snapshot and dropped). NotSupported, naming the part, for
// what has no stand-in: a left-out model with frozen parameters, C++
// optimizers or a C++ scheduler the target lacks. The store's errors pass
// through (NotFound for a step that is not stored).
Status AddStandIns(Store& store, int64_t step, TrainingState* target, StandIns* out);

}  // namespace trainsnap::python
