#include "restore/validate.h"

#include <algorithm>
#include <set>
#include <vector>

#include "torch/optimizer_traits.h"
#include "torch/dtype.h"

namespace trainsnap::internal {

namespace {

std::string DTypeString(uint32_t code) { return std::string(DTypeName(static_cast<DType>(code))); }

std::string NamesString(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out + "]";
}

template <class Range>
std::vector<int64_t> ToVector(const Range& range) {
  return std::vector<int64_t>(range.begin(), range.end());
}

// Shape and dtype of a target tensor against what the manifest recorded.
// `what` names the tensor; it is called on failure only (building the name
// for each of 150,000 tensors was a heap string each on the restore path).
template <class Message, class What>
Status CheckTensor(const What& what, const Message& expected, const torch::Tensor& actual) {
  const c10::IntArrayRef sizes = actual.sizes();
  if (!std::equal(sizes.begin(), sizes.end(), expected.shape().begin(), expected.shape().end())) {
    return Status::ContractMismatch(what() + ": expected shape " + ShapeString(ToVector(expected.shape())) +
                                    ", actual " + ShapeString(sizes));
  }
  Result<DType> dtype = ToDType(actual.scalar_type());
  if (!dtype.ok() || static_cast<uint32_t>(*dtype) != expected.dtype()) {
    return Status::ContractMismatch(what() + ": expected dtype " + DTypeString(expected.dtype()) + ", actual " +
                                    (dtype.ok() ? std::string(DTypeName(*dtype))
                                                : std::string(c10::toString(actual.scalar_type()))));
  }
  return Status::OK();
}

template <class Message>
std::string FirstName(const Message& message) {
  return message.names().empty() ? std::string("?") : message.names(0);
}

}  // namespace

Status CheckContract(const proto::TrainingManifest& manifest, const Contract& target) {
  // Which trainable parameters of the target the snapshot has, by position:
  // no table per restore.
  std::vector<bool> in_snapshot(target.trainable.size());
  for (int i = 0; i < manifest.params_size(); ++i) {
    const proto::ContractParam& param = manifest.params(i);
    auto what = [&param] { return "parameter `" + FirstName(param) + "`"; };
    const ContractEntry* found = target.Trainable(param.id(), static_cast<size_t>(i));
    if (found == nullptr) {
      return Status::ContractMismatch(what() + ": expected a trainable parameter, actual: " +
                                      (target.Frozen(param.id()) ? "frozen in the target"
                                                                            : "absent from the target"));
    }
    in_snapshot[target.TrainablePosition(found)] = true;
    const ContractEntry& entry = *found;
    if (!std::equal(param.names().begin(), param.names().end(), entry.names.begin(), entry.names.end())) {
      return Status::ContractMismatch(what() + ": expected names (tying) " +
                                      NamesString({param.names().begin(), param.names().end()}) + ", actual " +
                                      NamesString(entry.names));
    }
    TRAINSNAP_RETURN_IF_ERROR(CheckTensor(what, param, entry.tensor));
  }
  for (size_t i = 0; i < target.trainable.size(); ++i) {
    if (!in_snapshot[i]) {
      return Status::ContractMismatch("parameter `" + target.trainable[i].names.front() +
                                      "`: expected absent (not in the snapshot), actual: trainable in the target");
    }
  }
  for (const proto::ModelTensor& stored : manifest.model_tensors()) {
    const bool buffer = stored.role() == "buffer";
    auto what = [&] { return std::string(buffer ? "buffer `" : "parameter `") + FirstName(stored) + "`"; };
    const ContractEntry* entry = buffer ? target.Buffer(stored.id()) : target.Frozen(stored.id());
    if (entry == nullptr) return Status::ContractMismatch(what() + ": in the snapshot, absent from the target");
    TRAINSNAP_RETURN_IF_ERROR(CheckTensor(what, stored, entry->tensor));
  }
  return Status::OK();
}

Status CheckBaseIdentity(const proto::BaseIdentity& base, const Contract& target, const std::string& label,
                         BaseIdentityBuilder& builder) {
  const std::string what = "frozen base: ";
  if (!base.label().empty() && base.label() != label) {
    return Status::ContractMismatch(what + "expected label \"" + base.label() + "\", actual \"" + label + "\"");
  }
  const auto& frozen = base.frozen();
  for (int i = 0; i < frozen.size(); ++i) {
    const std::string param = what + "parameter `" + frozen[i].name() + "`";
    if (static_cast<size_t>(i) >= target.frozen.size()) {
      return Status::ContractMismatch(param + ": expected frozen, actual absent from the target");
    }
    const ContractEntry& entry = target.frozen[i];
    if (entry.names.front() != frozen[i].name()) {
      return Status::ContractMismatch(param + ": expected at frozen position " + std::to_string(i) +
                                      ", actual `" + entry.names.front() + "`");
    }
    TRAINSNAP_RETURN_IF_ERROR(CheckTensor([&param] { return param; }, frozen[i], entry.tensor));
  }
  if (target.frozen.size() > static_cast<size_t>(frozen.size())) {
    return Status::ContractMismatch(what + "parameter `" + target.frozen[frozen.size()].names.front() +
                                    "`: expected absent, actual frozen in the target");
  }
  if (base.has_content_hash()) {
    const uint64_t actual = builder.ContentHash(target);
    if (actual != base.content_hash()) {
      return Status::ContractMismatch(what + "content hash differs: expected " + std::to_string(base.content_hash()) +
                                      ", actual " + std::to_string(actual));
    }
  }
  return Status::OK();
}

Status CheckDevices(const Contract& target) {
  for (const auto* entries : {&target.trainable, &target.frozen, &target.buffers}) {
    for (const ContractEntry& entry : *entries) {
      const c10::DeviceType type = entry.tensor.device().type();
      if (type != c10::DeviceType::CPU && type != c10::DeviceType::CUDA) {
        return Status::NotSupported("tensor `" + entry.names.front() + "` lives on device " +
                                    entry.tensor.device().str() + "; restore copies to CPU and CUDA only");
      }
    }
  }
  return Status::OK();
}

namespace {

Status CheckOptimizer(const proto::OptimizerManifest& stored, const NamedOptimizer& target,
                      const Contract& contract) {
  std::string type;
  TRAINSNAP_RETURN_IF_ERROR(VisitOptimizer(*target.optimizer, [&](auto traits) {
    type = decltype(traits)::kName;
    return Status::OK();
  }));
  if (type != stored.type()) {
    return Status::ContractMismatch("expected type " + stored.type() + ", actual " + type);
  }
  const auto& groups = target.optimizer->param_groups();
  if (groups.size() != static_cast<size_t>(stored.groups_size())) {
    return Status::ContractMismatch("expected " + std::to_string(stored.groups_size()) + " param groups, actual " +
                                    std::to_string(groups.size()));
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    // Compared as sorted sets of IDs: sorted vectors, not node-based sets,
    // whose 50,000 nodes per side made this check grow faster than the
    // parameter count.
    std::vector<uint64_t> expected(stored.groups(g).param_ids().begin(), stored.groups(g).param_ids().end());
    std::vector<uint64_t> actual;
    actual.reserve(groups[g].params().size());
    for (const torch::Tensor& param : groups[g].params()) {
      auto it = contract.param_ids.find(param.unsafeGetTensorImpl());
      if (it == contract.param_ids.end()) {
        return Status::ContractMismatch("param group " + std::to_string(g) + " holds a tensor of shape " +
                                        ShapeString(param.sizes()) + " that is no parameter of the target models");
      }
      actual.push_back(it->second);
    }
    for (auto* ids : {&expected, &actual}) {
      std::sort(ids->begin(), ids->end());
      ids->erase(std::unique(ids->begin(), ids->end()), ids->end());
    }
    if (expected != actual) {
      return Status::ContractMismatch("param group " + std::to_string(g) + ": expected " +
                                      std::to_string(expected.size()) + " parameters, actual " +
                                      std::to_string(actual.size()) + ", membership differs");
    }
  }
  return Status::OK();
}

std::string KeyName(const std::string& key) { return key.empty() ? "(unnamed)" : "`" + key + "`"; }

}  // namespace

Status CheckComposition(const proto::TrainingManifest& manifest, const TrainingState& target,
                        const std::vector<NamedOptimizer>& optimizers, const Contract& contract) {
  // Optimizers, by name.
  std::set<std::string> stored_names;
  for (const auto& stored : manifest.optimizers()) {
    stored_names.insert(stored.name());
    const NamedOptimizer* match = nullptr;
    for (const NamedOptimizer& optimizer : optimizers) {
      if (optimizer.key == stored.name()) match = &optimizer;
    }
    const std::string what = "optimizer " + KeyName(stored.name());
    if (match == nullptr) return Status::ContractMismatch(what + ": in the snapshot, absent from the target");
    TRAINSNAP_RETURN_IF_ERROR(CheckOptimizer(stored, *match, contract).WithContext(what));
  }
  for (const NamedOptimizer& optimizer : optimizers) {
    if (!stored_names.count(optimizer.key)) {
      return Status::ContractMismatch("optimizer " + KeyName(optimizer.key) +
                                      ": in the target, absent from the snapshot");
    }
  }
  if (manifest.has_scheduler() != (target.scheduler != nullptr)) {
    return Status::ContractMismatch(std::string("scheduler: ") +
                                    (manifest.has_scheduler() ? "in the snapshot, absent from the target"
                                                              : "in the target, absent from the snapshot"));
  }
  if (manifest.has_accumulation() != (target.accumulation != nullptr)) {
    return Status::ContractMismatch(std::string("accumulation window: ") +
                                    (manifest.has_accumulation() ? "in the snapshot, absent from the target"
                                                                 : "in the target, absent from the snapshot"));
  }
  if (target.rng && !manifest.has_rng()) {
    return Status::ContractMismatch("RNG: requested by the target, absent from the snapshot");
  }
  // Both kinds of extra state share one key space; a key must be of the same
  // kind on both sides (a Stateful cannot load a TensorStateful's bytes).
  for (const auto& [name, stateful] : target.extra) {
    if (target.tensor_extra.count(name) != 0) {
      return Status::InvalidArgument("extra state `" + name + "`: is a key of both extra and tensor_extra");
    }
  }
  std::set<std::string> stored_extra;
  for (const auto& extra : manifest.extra()) {
    stored_extra.insert(extra.name());
    auto plain = target.extra.find(extra.name());
    auto tensors = target.tensor_extra.find(extra.name());
    const bool in_plain = plain != target.extra.end() && plain->second != nullptr;
    const bool in_tensors = tensors != target.tensor_extra.end() && tensors->second != nullptr;
    if (!in_plain && !in_tensors) {
      return Status::ContractMismatch("extra state `" + extra.name() + "`: in the snapshot, absent from the target");
    }
    if (in_tensors != extra.has_tensors()) {
      return Status::ContractMismatch("extra state `" + extra.name() + "`: " +
                                      (extra.has_tensors() ? "saved with tensors (tensor_extra), given as extra"
                                                           : "saved as extra, given as tensor_extra"));
    }
  }
  for (const auto& [name, stateful] : target.extra) {
    if (!stored_extra.count(name)) {
      return Status::ContractMismatch("extra state `" + name + "`: in the target, absent from the snapshot");
    }
  }
  for (const auto& [name, stateful] : target.tensor_extra) {
    if (!stored_extra.count(name)) {
      return Status::ContractMismatch("extra state `" + name + "`: in the target, absent from the snapshot");
    }
  }
  return Status::OK();
}

}  // namespace trainsnap::internal
