// The optimizers of a snapshot several processes captured with a sharded
// optimizer (ZeRO-1: each process's optimizer held the state of its own
// parameters), composed for a target that shards the parameters another
// way: each parameter's state is taken by ID from whichever process's part
// held it. Touches no live object.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "manifest.pb.h"
#include "torch/contract.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

// One process's part of the snapshot: its manifest (only its optimizers are
// read) and the name of the store that holds its optimizer state tensors.
struct OptimizerPart {
  std::string source;
  const proto::TrainingManifest* manifest = nullptr;
};

// The manifest of optimizer `name` for `target`: the target's param groups
// (IDs from `contract`), each parameter's state (step, roles) from the part
// whose optimizer held it, each group's options from the first part whose
// optimizer has that group; every state tensor is appended to `external`
// with its part's source. ContractMismatch: the parts' types differ from
// each other, a parameter of the target is in no part's optimizer, or was
// in another param group than the target's, or is no parameter of the
// target models. Corruption: two parts hold one parameter. NotFound: no
// part has optimizer `name`.
Result<proto::OptimizerManifest> ComposeOptimizer(const std::string& name, const std::vector<OptimizerPart>& parts,
                                                  const torch::optim::Optimizer& target, const Contract& contract,
                                                  google::protobuf::RepeatedPtrField<proto::ExternalTensor>* external);

}  // namespace trainsnap::internal
