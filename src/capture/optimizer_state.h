// Capture of one torch::optim optimizer: param groups (membership by
// parameter ID, options) and per-parameter state, keyed by parameter ID.
#pragma once

#include "torch/contract.h"
#include "capture/staging.h"
#include "manifest.pb.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

// Role prefix of an optimizer's state tensors: "" for the unnamed optimizer,
// "key:" for TrainingState::optimizers[key].
std::string OptimizerRolePrefix(const std::string& key);

// Fills `out` and stages every state tensor of `optimizer` as
// (param_id, prefix + role). NotSupported for LBFGS and unknown optimizers;
// InvalidArgument when a group holds a tensor that is no parameter of the
// captured models.
Status CaptureOptimizer(const NamedOptimizer& optimizer, const Contract& contract, StagingArea& staging,
                        proto::OptimizerManifest* out);

}  // namespace trainsnap::internal
