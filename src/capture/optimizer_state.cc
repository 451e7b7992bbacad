#include "capture/optimizer_state.h"

#include <unordered_map>
#include <unordered_set>

#include "torch/optimizer_traits.h"

namespace trainsnap::internal {

std::string OptimizerRolePrefix(const std::string& key) { return key.empty() ? "" : key + ":"; }

namespace {

template <class Traits>
Status CaptureWith(const NamedOptimizer& named, const Contract& contract, StagingArea& staging,
                   proto::OptimizerManifest* out) {
  using Options = typename Traits::Options;
  using State = typename Traits::State;
  torch::optim::Optimizer& optimizer = *named.optimizer;
  const std::string prefix = OptimizerRolePrefix(named.key);
  out->set_name(named.key);
  out->set_type(Traits::kName);
  out->set_role_prefix(prefix);
  std::unordered_set<uint64_t> seen;
  std::unordered_map<uint64_t, const std::string*> names;  // for error messages
  // Sized once: growing them rehashed every entry again at each doubling.
  seen.reserve(contract.trainable.size() + contract.frozen.size());
  names.reserve(contract.trainable.size() + contract.frozen.size());
  for (const auto* entries : {&contract.trainable, &contract.frozen}) {
    for (const ContractEntry& entry : *entries) names.emplace(entry.id, &entry.names.front());
  }
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& group = groups[g];
    const std::string where = "param group " + std::to_string(g);
    proto::ParamGroup* group_out = out->add_groups();
    const auto* options = dynamic_cast<const Options*>(&group.options());
    if (options == nullptr) {
      return Status::InvalidArgument(where + ": options are not " + Traits::kName + "Options");
    }
    Traits::SaveOptions(*options, group_out->mutable_options());
    for (const torch::Tensor& param : group.params()) {
      auto id_it = contract.param_ids.find(param.unsafeGetTensorImpl());
      if (id_it == contract.param_ids.end()) {
        return Status::InvalidArgument(where + " holds a tensor of shape " + ShapeString(param.sizes()) +
                                       " that is no parameter of the captured models");
      }
      const uint64_t id = id_it->second;
      group_out->add_param_ids(id);
      if (!seen.insert(id).second) continue;  // listed twice: its state is captured once
      auto state_it = optimizer.state().find(OptimizerStateKey(param));
      if (state_it == optimizer.state().end()) continue;
      const auto* state = dynamic_cast<const State*>(state_it->second.get());
      if (state == nullptr) {
        return Status::InvalidArgument(where + ": state entry is not " + Traits::kName + "ParamState");
      }
      proto::ParamOptimizerState* state_out = out->add_params();
      state_out->set_param_id(id);
      state_out->set_step(Traits::Step(*state));
      for (const auto& [role, tensor] : Traits::Tensors(*state)) {
        if (!tensor.defined()) continue;
        // The context is built on failure only (it was built for every
        // state tensor: two heap strings each, on the training thread).
        Status added = staging.Add(id, prefix + role, tensor, *names.at(id));
        if (!added.ok()) return added.WithContext("parameter `" + *names.at(id) + "` state " + role);
        state_out->add_roles(role);
      }
    }
  }
  return Status::OK();
}

}  // namespace

Status CaptureOptimizer(const NamedOptimizer& optimizer, const Contract& contract, StagingArea& staging,
                        proto::OptimizerManifest* out) {
  Status status = VisitOptimizer(*optimizer.optimizer, [&](auto traits) {
    return CaptureWith<decltype(traits)>(optimizer, contract, staging, out);
  });
  return status.WithContext(optimizer.key.empty() ? "optimizer" : "optimizer `" + optimizer.key + "`");
}

}  // namespace trainsnap::internal
