#include "restore/optimizer_restore.h"

#include <unordered_map>

#include "capture/optimizer_traits.h"

namespace trainsnap::internal {

namespace {

const ContractEntry* FindParam(const Contract& contract, uint64_t id) {
  for (const auto* entries : {&contract.trainable, &contract.frozen}) {
    for (const ContractEntry& entry : *entries) {
      if (entry.id == id) return &entry;
    }
  }
  return nullptr;
}

template <class Traits>
Status PrepareWith(const proto::OptimizerManifest& stored, torch::optim::Optimizer& target,
                   const Contract& contract, const DecodedTensors& decoded, PreparedOptimizer* out) {
  using Options = typename Traits::Options;
  using State = typename Traits::State;
  out->optimizer = &target;
  // The target's own tensor for every parameter ID its groups hold: the
  // state key is derived from it, never from the snapshot.
  std::unordered_map<uint64_t, torch::Tensor> tensor_by_id;
  auto& groups = target.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    auto* options = dynamic_cast<Options*>(&groups[g].options());
    if (options == nullptr) {
      return Status::ContractMismatch("param group " + std::to_string(g) + ": options are not " + Traits::kName +
                                      "Options");
    }
    auto restored = std::make_unique<Options>(*options);
    Traits::LoadOptions(stored.groups(static_cast<int>(g)).options(), *restored);
    out->group_options.push_back(std::move(restored));
    for (const torch::Tensor& param : groups[g].params()) {
      tensor_by_id.emplace(contract.param_ids.at(param.unsafeGetTensorImpl()), param);
    }
  }
  for (const proto::ParamOptimizerState& param_state : stored.params()) {
    auto it = tensor_by_id.find(param_state.param_id());
    if (it == tensor_by_id.end()) {
      return Status::Corruption("state of parameter " + std::to_string(param_state.param_id()) +
                                " that no param group holds");
    }
    const torch::Tensor& param = it->second;
    const ContractEntry* entry = FindParam(contract, param_state.param_id());
    const std::string what = "parameter `" + (entry ? entry->names.front() : std::string("?")) + "`";
    auto state = std::make_unique<State>();
    Traits::SetStep(*state, param_state.step());
    for (const std::string& role : param_state.roles()) {
      auto tensor_it = decoded.find(TensorKey(param_state.param_id(), stored.role_prefix() + role));
      if (tensor_it == decoded.end()) return Status::Corruption(what + " role " + role + ": not decoded");
      torch::Tensor tensor = tensor_it->second.to(param.device(), /*non_blocking=*/false, /*copy=*/false);
      if (!Traits::SetTensor(*state, role, tensor)) {
        return Status::Corruption(what + ": unknown " + Traits::kName + " state role " + role);
      }
    }
    for (std::string_view required : Traits::RequiredRoles()) {
      bool present = false;
      for (const std::string& role : param_state.roles()) present = present || role == required;
      if (!present) return Status::Corruption(what + ": " + Traits::kName + " state lacks " + std::string(required));
    }
    out->state.emplace_back(OptimizerStateKey(param), std::move(state));
  }
  return Status::OK();
}

}  // namespace

Status WantOptimizerTensors(const proto::OptimizerManifest& stored, const Contract& target,
                            std::vector<WantedTensor>* wanted) {
  for (const proto::ParamOptimizerState& param_state : stored.params()) {
    const ContractEntry* entry = FindParam(target, param_state.param_id());
    if (entry == nullptr) {
      return Status::ContractMismatch("optimizer state of parameter ID " + std::to_string(param_state.param_id()) +
                                      ": absent from the target models");
    }
    for (const std::string& role : param_state.roles()) {
      WantedTensor want;
      want.param_id = param_state.param_id();
      want.role = stored.role_prefix() + role;
      want.name = entry->names.front();
      want.shape = entry->tensor.sizes().vec();
      wanted->push_back(std::move(want));
    }
  }
  return Status::OK();
}

Result<PreparedOptimizer> PrepareOptimizer(const proto::OptimizerManifest& stored, torch::optim::Optimizer& target,
                                           const Contract& contract, const DecodedTensors& decoded) {
  PreparedOptimizer prepared;
  TRAINSNAP_RETURN_IF_ERROR(VisitOptimizer(target, [&](auto traits) {
    return PrepareWith<decltype(traits)>(stored, target, contract, decoded, &prepared);
  }));
  return prepared;
}

void ApplyOptimizer(PreparedOptimizer& prepared) {
  auto& groups = prepared.optimizer->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) groups[g].set_options(std::move(prepared.group_options[g]));
  auto& state = prepared.optimizer->state();
  state.clear();
  for (auto& [key, entry] : prepared.state) state[key] = std::move(entry);
}

}  // namespace trainsnap::internal
