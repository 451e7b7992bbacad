// EstimateStagedBytes: about how many bytes Stage (capture/stage.h) would
// copy for a training state, found without copying anything. The overhead
// budget predicts a run's first capture from it (checkpointer/
// overhead_budget.h), before any capture has been timed.
#pragma once

#include <cstdint>

#include "torch/contract_cache.h"
#include "trainsnap/checkpointer.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

// The bytes of the trainable parameters, of their gradients where Stage
// takes them (StagesGradients; a zeroed gradient counts, though Stage reads
// it and stores none), of the buffers (unless ModelState::
// kTrainable), of the frozen parameters (ModelState::kFull only) and of
// every optimizer's state tensors. Not counted: tensor_extra, the RNG and
// the scalar state (small next to the tensors), and the hashing of a
// frozen base. Errors are the ones Stage would return for the same state
// (CollectModels', the contract's, VisitOptimizer's NotSupported). The
// contract comes from `contracts` (null: built for this call alone), so a
// capture that follows reuses it. May throw what LibTorch throws.
Result<uint64_t> EstimateStagedBytes(const TrainingState& state, const CheckpointerOptions& options,
                                     ContractCache* contracts);

}  // namespace trainsnap::internal
