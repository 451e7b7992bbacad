#include "restore/optimizer_restore.h"

#include "torch/optimizer_traits.h"

namespace trainsnap::internal {

namespace {

// Parameters are listed in model order: after finding trainable `entry`,
// the next one is usually at the following position (Contract's hints).
void SkipPast(const Contract& contract, const ContractEntry* entry, size_t* next) {
  const size_t at = contract.TrainablePosition(entry);
  if (at < contract.trainable.size()) *next = at + 1;
}

bool HasRole(const proto::ParamOptimizerState& state, std::string_view role) {
  for (const std::string& present : state.roles()) {
    if (present == role) return true;
  }
  return false;
}

template <class Traits>
Status PrepareWith(const proto::OptimizerManifest& stored, torch::optim::Optimizer& target,
                   const Contract& contract, DecodedTensors& decoded, bool restore_options,
                   PreparedOptimizer* out) {
  using Options = typename Traits::Options;
  using State = typename Traits::State;
  out->optimizer = &target;
  // The target's own tensor for every parameter its groups hold (the first
  // group's, for one listed twice), with the options in effect after the
  // restore: the state key is derived from it, never from the snapshot. By
  // the parameter's position in the contract, not in a table keyed by ID.
  struct Held {
    const torch::Tensor* param = nullptr;
    const Options* options = nullptr;
  };
  std::vector<Held> held(contract.trainable.size() + contract.frozen.size());
  auto slot = [&](const ContractEntry* entry) -> Held& {
    const size_t at = contract.TrainablePosition(entry);
    if (at < contract.trainable.size()) return held[at];
    return held[contract.trainable.size() + static_cast<size_t>(entry - contract.frozen.data())];
  };
  auto& groups = target.param_groups();
  size_t next = 0;  // where the next parameter usually is in contract.trainable
  for (size_t g = 0; g < groups.size(); ++g) {
    auto* options = dynamic_cast<Options*>(&groups[g].options());
    if (options == nullptr) {
      return Status::ContractMismatch("param group " + std::to_string(g) + ": options are not " + Traits::kName +
                                      "Options");
    }
    const Options* effective = options;
    if (restore_options) {
      auto restored = std::make_unique<Options>(*options);
      Traits::LoadOptions(stored.groups(static_cast<int>(g)).options(), *restored);
      effective = restored.get();
      out->group_options.push_back(std::move(restored));
    }
    for (const torch::Tensor& param : groups[g].params()) {
      const ContractEntry* entry = contract.Param(param.unsafeGetTensorImpl(), next);
      if (entry == nullptr) {
        return Status::ContractMismatch("param group " + std::to_string(g) + " holds a tensor of shape " +
                                        ShapeString(param.sizes()) + " that is no parameter of the target models");
      }
      SkipPast(contract, entry, &next);
      Held& h = slot(entry);
      if (h.param == nullptr) h = {&param, effective};
    }
  }
  next = 0;
  out->state.reserve(static_cast<size_t>(stored.params_size()));
  for (const proto::ParamOptimizerState& param_state : stored.params()) {
    const ContractEntry* entry = contract.Param(param_state.param_id(), next);
    const Held* it = entry != nullptr ? &slot(entry) : nullptr;
    if (it == nullptr || it->param == nullptr) {
      return Status::Corruption("state of parameter " + std::to_string(param_state.param_id()) +
                                " that no param group holds");
    }
    SkipPast(contract, entry, &next);
    const torch::Tensor& param = *it->param;
    // Built on failure only: a heap string per parameter otherwise.
    auto what = [entry] { return "parameter `" + (entry ? entry->names.front() : std::string("?")) + "`"; };
    auto state = std::make_unique<State>();
    Traits::SetStep(*state, param_state.step());
    for (const std::string& role : param_state.roles()) {
      const torch::Tensor* decoded_tensor = decoded.Find(param_state.param_id(), stored.role_prefix(), role);
      if (decoded_tensor == nullptr) return Status::Corruption(what() + " role " + role + ": not decoded");
      torch::Tensor tensor = decoded_tensor->to(param.device(), /*non_blocking=*/false, /*copy=*/false);
      if (!Traits::SetTensor(*state, role, tensor)) {
        return Status::Corruption(what() + ": unknown " + Traits::kName + " state role " + role);
      }
    }
    for (std::string_view required : Traits::RequiredRoles()) {
      if (!HasRole(param_state, required)) {
        return Status::Corruption(what() + ": " + Traits::kName + " state lacks " + std::string(required));
      }
    }
    // Only possible with the target's own options (the snapshot's come with
    // their state): step() would read state that is not there.
    for (std::string_view needed : Traits::RolesNeededBy(*it->options)) {
      if (!HasRole(param_state, needed)) {
        return Status::ContractMismatch(what() + ": the target's " + Traits::kName + " options need state " +
                                        std::string(needed) + ", which the snapshot lacks; restore the " +
                                        "snapshot's options (RestoreOptions::restore_optimizer_options)");
      }
    }
    out->state.emplace_back(OptimizerStateKey(param), std::move(state));
  }
  return Status::OK();
}

}  // namespace

Status WantOptimizerTensors(const proto::OptimizerManifest& stored, const Contract& target,
                            std::vector<WantedTensor>* wanted) {
  size_t next = 0;  // where the next parameter usually is in target.trainable
  for (const proto::ParamOptimizerState& param_state : stored.params()) {
    const ContractEntry* entry = target.Param(param_state.param_id(), next);
    SkipPast(target, entry, &next);
    if (entry == nullptr) {
      return Status::ContractMismatch("optimizer state of parameter ID " + std::to_string(param_state.param_id()) +
                                      ": absent from the target models");
    }
    for (const std::string& role : param_state.roles()) {
      WantedTensor want;
      want.param_id = param_state.param_id();
      want.role = stored.role_prefix() + role;
      want.name = &entry->names.front();
      want.shape = entry->tensor.sizes();
      wanted->push_back(std::move(want));
    }
  }
  return Status::OK();
}

Result<PreparedOptimizer> PrepareOptimizer(const proto::OptimizerManifest& stored, torch::optim::Optimizer& target,
                                           const Contract& contract, DecodedTensors& decoded,
                                           bool restore_options) {
  PreparedOptimizer prepared;
  TRAINSNAP_RETURN_IF_ERROR(VisitOptimizer(target, [&](auto traits) {
    return PrepareWith<decltype(traits)>(stored, target, contract, decoded, restore_options, &prepared);
  }));
  return prepared;
}

void ApplyOptimizer(PreparedOptimizer& prepared) {
  auto& groups = prepared.optimizer->param_groups();
  for (size_t g = 0; g < prepared.group_options.size(); ++g) {
    groups[g].set_options(std::move(prepared.group_options[g]));
  }
  auto& state = prepared.optimizer->state();
  state.clear();
  for (auto& [key, entry] : prepared.state) state[key] = std::move(entry);
}

}  // namespace trainsnap::internal
