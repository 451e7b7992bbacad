#include "capture/optimizer_state.h"

#include <vector>

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
  // Whether a parameter's state is captured already (a parameter listed
  // twice: once), by its position in the contract: no table per capture.
  std::vector<bool> seen_trainable(contract.trainable.size()), seen_frozen(contract.frozen.size());
  size_t next = 0;  // where the next parameter usually is in contract.trainable
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
      const ContractEntry* entry = contract.Param(param.unsafeGetTensorImpl(), next);
      if (entry == nullptr) {
        return Status::InvalidArgument(where + " holds a tensor of shape " + ShapeString(param.sizes()) +
                                       " that is no parameter of the captured models");
      }
      const uint64_t id = entry->id;
      group_out->add_param_ids(id);
      std::vector<bool>* seen = &seen_trainable;
      size_t index = contract.TrainablePosition(entry);
      if (index < contract.trainable.size()) {
        next = index + 1;
      } else {
        seen = &seen_frozen;
        index = static_cast<size_t>(entry - contract.frozen.data());
      }
      if ((*seen)[index]) continue;
      (*seen)[index] = true;
      auto state_it = optimizer.state().find(OptimizerStateKey(param));
      if (state_it == optimizer.state().end()) continue;
      const auto* state = dynamic_cast<const State*>(state_it->second.get());
      if (state == nullptr) {
        return Status::InvalidArgument(where + ": state entry is not " + Traits::kName + "ParamState");
      }
      proto::ParamOptimizerState* state_out = out->add_params();
      state_out->set_param_id(id);
      state_out->set_step(Traits::Step(*state));
      const std::string& name = entry->names.front();
      Status added;
      Traits::ForEachTensor(*state, [&](const char* role, const torch::Tensor& tensor) {
        if (!added.ok() || !tensor.defined()) return;
        // The context is built on failure only (it was built for every
        // state tensor: two heap strings each, on the training thread).
        added = staging.Add(id, prefix + role, tensor, entry->shared_name);
        if (!added.ok()) {
          added = added.WithContext("parameter `" + name + "` state " + role);
          return;
        }
        state_out->add_roles(role);
      });
      TRAINSNAP_RETURN_IF_ERROR(added);
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
