#include "restore/optimizer_parts.h"

#include <unordered_map>

namespace trainsnap::internal {

namespace {

// Where one parameter was at capture.
struct Held {
  size_t part = 0;
  int group = 0;
  const proto::ParamOptimizerState* state = nullptr;  // null: it had no state yet
};

std::string ParamName(const Contract& contract, uint64_t id) {
  const ContractEntry* entry = contract.Param(id);
  return entry != nullptr ? "`" + entry->names.front() + "`" : "ID " + std::to_string(id);
}

}  // namespace

Result<proto::OptimizerManifest> ComposeOptimizer(const std::string& name, const std::vector<OptimizerPart>& parts,
                                                  const torch::optim::Optimizer& target, const Contract& contract,
                                                  google::protobuf::RepeatedPtrField<proto::ExternalTensor>* external) {
  std::vector<const proto::OptimizerManifest*> stored(parts.size(), nullptr);
  const proto::OptimizerManifest* first = nullptr;
  for (size_t p = 0; p < parts.size(); ++p) {
    for (const proto::OptimizerManifest& optimizer : parts[p].manifest->optimizers()) {
      if (optimizer.name() == name) stored[p] = &optimizer;
    }
    if (stored[p] == nullptr) continue;
    if (first == nullptr) first = stored[p];
    if (stored[p]->type() != first->type()) {
      return Status::ContractMismatch("the ranks' optimizers are of different types: " + first->type() + " and " +
                                      stored[p]->type() + " (" + parts[p].source + ")");
    }
  }
  if (first == nullptr) return Status::NotFound("no rank's snapshot holds this optimizer");
  std::unordered_map<uint64_t, Held> held;
  for (size_t p = 0; p < parts.size(); ++p) {
    if (stored[p] == nullptr) continue;
    for (int g = 0; g < stored[p]->groups_size(); ++g) {
      for (uint64_t id : stored[p]->groups(g).param_ids()) {
        auto [it, fresh] = held.emplace(id, Held{p, g, nullptr});
        if (!fresh && it->second.part != p) {
          return Status::Corruption("parameter " + ParamName(contract, id) + " is in the optimizers of both " +
                                    parts[it->second.part].source + " and " + parts[p].source);
        }
      }
    }
    for (const proto::ParamOptimizerState& state : stored[p]->params()) {
      auto it = held.find(state.param_id());
      if (it == held.end() || it->second.part != p) {
        return Status::Corruption("state of parameter " + ParamName(contract, state.param_id()) + " in " +
                                  parts[p].source + ", whose param groups do not hold it");
      }
      it->second.state = &state;
    }
  }
  proto::OptimizerManifest out;
  out.set_name(first->name());
  out.set_type(first->type());
  out.set_role_prefix(first->role_prefix());
  const auto& groups = target.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    proto::ParamGroup* group = out.add_groups();
    for (size_t p = 0; p < parts.size(); ++p) {
      if (stored[p] != nullptr && static_cast<size_t>(stored[p]->groups_size()) > g) {
        *group->mutable_options() = stored[p]->groups(static_cast<int>(g)).options();
        break;
      }
    }
    for (const torch::Tensor& param : groups[g].params()) {
      auto id = contract.param_ids.find(param.unsafeGetTensorImpl());
      if (id == contract.param_ids.end()) {
        return Status::ContractMismatch("param group " + std::to_string(g) + " holds a tensor of shape " +
                                        ShapeString(param.sizes()) + " that is no parameter of the target models");
      }
      group->add_param_ids(id->second);
      auto it = held.find(id->second);
      if (it == held.end()) {
        return Status::ContractMismatch("parameter " + ParamName(contract, id->second) +
                                        ": in no rank's optimizer of the snapshot");
      }
      if (static_cast<size_t>(it->second.group) != g) {
        return Status::ContractMismatch(
            "parameter " + ParamName(contract, id->second) + ": in param group " + std::to_string(it->second.group) +
            " at capture (" + parts[it->second.part].source + "), in group " + std::to_string(g) + " of the target");
      }
      const proto::ParamOptimizerState* state = it->second.state;
      if (state == nullptr) continue;
      *out.add_params() = *state;
      for (const std::string& role : state->roles()) {
        proto::ExternalTensor* tensor = external->Add();
        tensor->set_id(state->param_id());
        tensor->set_role(first->role_prefix() + role);
        tensor->set_source(parts[it->second.part].source);
      }
      it->second.state = nullptr;  // a parameter listed twice gets its state once
    }
  }
  return out;
}

}  // namespace trainsnap::internal
