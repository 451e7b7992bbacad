// Restore of one torch::optim optimizer: new per-parameter state entries
// under the target tensors' own keys, and the param groups' options. Split
// into Prepare (builds everything, touches nothing) and Apply (swaps it in).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "torch/contract.h"
#include "manifest.pb.h"
#include "restore/decode.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

// The tensors `stored` needs, shaped like the target parameters they belong to.
Status WantOptimizerTensors(const proto::OptimizerManifest& stored, const Contract& target,
                            std::vector<WantedTensor>* wanted);

struct PreparedOptimizer {
  torch::optim::Optimizer* optimizer = nullptr;
  // One per group; empty when the target keeps its own options.
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> group_options;
  std::vector<std::pair<std::string, std::unique_ptr<torch::optim::OptimizerParamState>>> state;
};

// Builds the restored groups' options (unless `restore_options` is false:
// the target keeps its own) and state entries (tensors on the parameters'
// devices). Expects CheckComposition to have passed; Corruption for state
// the manifest describes inconsistently; ContractMismatch when the options
// kept lack state they need (e.g. the caller's amsgrad, a snapshot without
// max_exp_avg_sq).
Result<PreparedOptimizer> PrepareOptimizer(const proto::OptimizerManifest& stored, torch::optim::Optimizer& target,
                                           const Contract& contract, DecodedTensors& decoded,
                                           bool restore_options = true);

// Replaces the whole state map and every group's options (those prepared).
// Does not throw.
void ApplyOptimizer(PreparedOptimizer& prepared);

}  // namespace trainsnap::internal
