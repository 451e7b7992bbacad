#include "torch/contract.h"

#include <functional>
#include <map>
#include <sstream>
#include <unordered_set>

#include <xxhash.h>

#include "torch/model_walk.h"

namespace trainsnap::internal {

Result<std::vector<NamedModel>> CollectModels(const TrainingState& state) {
  std::vector<NamedModel> models;
  if (state.model != nullptr) models.push_back({"", state.model});
  for (const auto& [key, module] : state.models) {
    if (key.empty()) return Status::InvalidArgument("TrainingState::models: empty model key");
    if (module == nullptr) return Status::InvalidArgument("TrainingState::models[\"" + key + "\"] is null");
    models.push_back({key, module});
  }
  return models;
}

Result<std::vector<NamedOptimizer>> CollectOptimizers(const TrainingState& state) {
  std::vector<NamedOptimizer> optimizers;
  if (state.optimizer != nullptr) optimizers.push_back({"", state.optimizer});
  for (const auto& [key, optimizer] : state.optimizers) {
    if (key.empty()) return Status::InvalidArgument("TrainingState::optimizers: empty optimizer key");
    if (optimizer == nullptr) {
      return Status::InvalidArgument("TrainingState::optimizers[\"" + key + "\"] is null");
    }
    optimizers.push_back({key, optimizer});
  }
  return optimizers;
}

std::string QualifiedName(std::string_view model_key, std::string_view name) {
  if (model_key.empty()) return std::string(name);
  std::string qualified(model_key);
  qualified += '/';
  qualified += name;
  return qualified;
}

uint64_t ParamId(std::string_view qualified_name) {
  return XXH3_64bits(qualified_name.data(), qualified_name.size());
}

uint64_t ExtraTensorId(std::string_view extra, std::string_view tensor) {
  std::string key = "extra:";
  key.append(extra).append("/").append(tensor);
  return ParamId(key);
}

std::string ShapeString(c10::IntArrayRef shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

bool HasAliasableBytes(const torch::Tensor& tensor) {
  return tensor.numel() > 0 && tensor.has_storage() && tensor.data_ptr() != nullptr;
}

namespace {

// Groups tensors by identity: the same TensorImpl, or (for non-empty tensors)
// the same first byte of storage with the same shape and dtype, which is how
// two distinct TensorImpls alias. A tensor starting at the same byte with
// another shape or dtype (a view such as w[0] or w.view(-1) at storage
// offset 0) is not a tie but a tensor of its own, like a view at any other
// offset: both are captured, and restore writes both with the same bytes.
class TieGrouper {
 public:
  // Returns the index of the group `tensor` joins, or -1 for a new one.
  long Find(const torch::Tensor& tensor) const {
    if (auto it = by_impl_.find(tensor.unsafeGetTensorImpl()); it != by_impl_.end()) return it->second;
    if (HasAliasableBytes(tensor)) {
      if (auto it = by_data_.find(tensor.data_ptr()); it != by_data_.end()) {
        const c10::TensorImpl& first = *it->second.first;
        if (first.sizes() == tensor.sizes() && first.dtype() == tensor.dtype()) return it->second.second;
      }
    }
    return -1;
  }
  void Reserve(size_t n) {
    by_impl_.reserve(n);
    by_data_.reserve(n);
  }
  void Add(const torch::Tensor& tensor, long group) {
    by_impl_.emplace(tensor.unsafeGetTensorImpl(), group);
    if (HasAliasableBytes(tensor)) by_data_.emplace(tensor.data_ptr(), std::make_pair(tensor.unsafeGetTensorImpl(), group));
  }

 private:
  std::unordered_map<const c10::TensorImpl*, long> by_impl_;
  // The first tensor seen at each data pointer, and its group. Not owning
  // references: the models hold the tensors while the contract is built
  // (and dropping 50,000 references was most of this table's cost).
  std::unordered_map<const void*, std::pair<const c10::TensorImpl*, long>> by_data_;
};

Status CheckTie(const ContractEntry& entry, const torch::Tensor& tensor, const std::string& name) {
  const torch::Tensor& first = entry.tensor;
  if (first.sizes() != tensor.sizes() || first.scalar_type() != tensor.scalar_type() ||
      first.requires_grad() != tensor.requires_grad()) {
    return Status::InvalidArgument(
        "tied parameters `" + entry.names.front() + "` and `" + name + "` disagree: " +
        ShapeString(first.sizes()) + " " + c10::toString(first.scalar_type()) +
        (first.requires_grad() ? " trainable" : " frozen") + " vs " + ShapeString(tensor.sizes()) + " " +
        c10::toString(tensor.scalar_type()) + (tensor.requires_grad() ? " trainable" : " frozen"));
  }
  return Status::OK();
}

void AddImpl(ContractEntry& entry, const torch::Tensor& tensor) {
  const c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  for (const c10::TensorImpl* known : entry.impls) {
    if (known == impl) return;
  }
  entry.impls.push_back(impl);
}

}  // namespace

Result<Contract> BuildContract(const std::vector<NamedModel>& models) {
  // Parameters are grouped first in one list (trainable and frozen together,
  // so that a tie across the two is caught), then split.
  std::vector<ContractEntry> params;
  TieGrouper param_groups;
  std::vector<ContractEntry> buffers;
  TieGrouper buffer_groups;
  // Adds `tensor` under `name`: to its tie group when the tensor is already
  // known under another name, else as a new entry.
  auto add = [](std::vector<ContractEntry>& entries, TieGrouper& groups, const std::string& model_key,
                const torch::Tensor& tensor, std::string name) -> Status {
    long group = groups.Find(tensor);
    if (group >= 0) {
      TRAINSNAP_RETURN_IF_ERROR(CheckTie(entries[group], tensor, name));
      entries[group].names.push_back(std::move(name));
      AddImpl(entries[group], tensor);
      groups.Add(tensor, group);
      return Status::OK();
    }
    groups.Add(tensor, static_cast<long>(entries.size()));
    ContractEntry entry;
    entry.id = ParamId(name);
    entry.model = model_key;
    entry.names.push_back(std::move(name));
    entry.shared_name = std::make_shared<const std::string>(entry.names.front());
    entry.tensor = tensor;
    entry.impls.push_back(tensor.unsafeGetTensorImpl());
    entries.push_back(std::move(entry));
    return Status::OK();
  };
  // Tables sized once: growing them rehashed every entry again at each
  // doubling (to scale linearly at 50k parameters). Undefined
  // parameters are counted too: an upper bound is enough.
  size_t param_count = 0, buffer_count = 0;
  for (const NamedModel& model : models) {
    const torch::nn::Module& root = *model.module;
    root.apply([&](const torch::nn::Module& module) {
      param_count += ModuleParameters::Of(module).size();
      buffer_count += module.buffers(/*recurse=*/false).size();
    });
  }
  params.reserve(param_count);
  param_groups.Reserve(param_count);
  buffers.reserve(buffer_count);
  buffer_groups.Reserve(buffer_count);
  Status status;
  for (const NamedModel& model : models) {
    WalkModule(
        *model.module, [](const std::string&, const torch::nn::Module&) {},
        [&](const std::string& prefix, const std::string& key, const torch::Tensor& tensor) {
          if (!status.ok()) return;
          std::string name = QualifiedName(model.key, JoinName(prefix, key));
          if (tensor.is_sparse()) {
            status = Status::NotSupported("parameter `" + name + "` is sparse");
            return;
          }
          status = add(params, param_groups, model.key, tensor, std::move(name));
        },
        [&](const std::string& prefix, const std::string& key, const torch::Tensor& tensor) {
          if (!status.ok()) return;
          status = add(buffers, buffer_groups, model.key, tensor, QualifiedName(model.key, JoinName(prefix, key)));
        });
    TRAINSNAP_RETURN_IF_ERROR(status);
  }

  Contract contract;
  contract.param_ids.reserve(param_count);
  contract.trainable_index.reserve(params.size());
  contract.trainable.reserve(params.size());
  contract.buffer_index.reserve(buffers.size());
  contract.buffers.reserve(buffers.size());
  std::unordered_map<uint64_t, std::string> names_by_id;
  names_by_id.reserve(std::max(params.size(), buffers.size()));
  auto claim_id = [&](const ContractEntry& entry) -> Status {
    auto [it, inserted] = names_by_id.emplace(entry.id, entry.names.front());
    if (!inserted) {
      return Status::InvalidArgument("parameters `" + it->second + "` and `" + entry.names.front() +
                                     "` have the same ID");
    }
    return Status::OK();
  };
  for (ContractEntry& entry : params) {
    TRAINSNAP_RETURN_IF_ERROR(claim_id(entry));
    for (const c10::TensorImpl* impl : entry.impls) contract.param_ids.emplace(impl, entry.id);
    if (entry.tensor.requires_grad()) {
      contract.trainable_index.emplace(entry.id, contract.trainable.size());
      contract.trainable.push_back(std::move(entry));
    } else {
      contract.frozen_index.emplace(entry.id, contract.frozen.size());
      contract.frozen.push_back(std::move(entry));
    }
  }
  // Buffers live in their own ID space (stored under role "buffer").
  names_by_id.clear();
  for (ContractEntry& entry : buffers) {
    TRAINSNAP_RETURN_IF_ERROR(claim_id(entry));
    contract.buffer_index.emplace(entry.id, contract.buffers.size());
    contract.buffers.push_back(std::move(entry));
  }
  return contract;
}

namespace {

const ContractEntry* Lookup(const std::unordered_map<uint64_t, size_t>& index,
                            const std::vector<ContractEntry>& entries, uint64_t id) {
  auto it = index.find(id);
  return it == index.end() ? nullptr : &entries[it->second];
}

}  // namespace

const ContractEntry* Contract::Trainable(uint64_t id) const { return Lookup(trainable_index, trainable, id); }
const ContractEntry* Contract::Frozen(uint64_t id) const { return Lookup(frozen_index, frozen, id); }
const ContractEntry* Contract::Buffer(uint64_t id) const { return Lookup(buffer_index, buffers, id); }
const ContractEntry* Contract::Param(uint64_t id) const {
  const ContractEntry* entry = Trainable(id);
  return entry != nullptr ? entry : Frozen(id);
}

const ContractEntry* Contract::Trainable(uint64_t id, size_t hint) const {
  if (hint < trainable.size() && trainable[hint].id == id) return &trainable[hint];
  return Trainable(id);
}

const ContractEntry* Contract::Param(uint64_t id, size_t hint) const {
  const ContractEntry* entry = Trainable(id, hint);
  return entry != nullptr ? entry : Frozen(id);
}

const ContractEntry* Contract::Param(const c10::TensorImpl* impl, size_t hint) const {
  // The entry's own tensor handle holds its first TensorImpl: comparing the
  // pointer reads the entry, not the tensor.
  if (hint < trainable.size() && trainable[hint].tensor.unsafeGetTensorImpl() == impl) return &trainable[hint];
  auto it = param_ids.find(impl);
  return it == param_ids.end() ? nullptr : Param(it->second);
}

size_t Contract::TrainablePosition(const ContractEntry* entry) const {
  // std::less: a total order even for pointers into other arrays (or null).
  const std::less<const ContractEntry*> before;
  if (entry == nullptr || before(entry, trainable.data()) || !before(entry, trainable.data() + trainable.size())) {
    return trainable.size();
  }
  return static_cast<size_t>(entry - trainable.data());
}

Status CheckNoFrozenGradients(const Contract& contract) {
  for (const ContractEntry& entry : contract.frozen) {
    if (entry.tensor.grad().defined()) {
      return Status::InvalidArgument("frozen parameter `" + entry.names.front() +
                                     "` (requires_grad=false) holds a gradient");
    }
  }
  return Status::OK();
}

}  // namespace trainsnap::internal
