#include "torch/contract_cache.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "torch/model_walk.h"

namespace trainsnap::internal {

ContractCache::Lease::~Lease() {
  if (cache_ != nullptr) cache_->Release();
}

Result<ContractCache::Lease> ContractCache::Acquire(ContractCache* cache, const std::vector<NamedModel>& models) {
  if (cache != nullptr) return cache->Acquire(models);
  Result<Contract> built = BuildContract(models);
  if (!built.ok()) return built.status();
  return Lease(std::make_unique<Contract>(std::move(built).value()));
}

Result<ContractCache::Lease> ContractCache::Acquire(const std::vector<NamedModel>& models) {
  if (leased_) return Status::Busy("the contract cache is already in use (one capture or restore at a time)");
  reused_ = false;
  for (size_t i = 0; i < entries_.size(); ++i) {
    bool matched = false;
    try {
      matched = Matches(entries_[i], models);
    } catch (...) {
      // A throw part-way leaves tensors refilled from the models: forget
      // the entry rather than keep them.
      entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
      throw;
    }
    if (!matched) {
      Drop(entries_[i]);  // what a partial match refilled
      continue;
    }
    std::rotate(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(i),
                entries_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    reused_ = true;
    leased_ = true;
    return Lease(this);
  }
  TRAINSNAP_ASSIGN_OR_RETURN(Entry built, Build(models));
  if (entries_.size() == kEntries) entries_.pop_back();
  entries_.insert(entries_.begin(), std::move(built));
  leased_ = true;
  return Lease(this);
}

bool ContractCache::Matches(Entry& entry, const std::vector<NamedModel>& models) {
  if (models.size() != entry.model_keys.size()) return false;
  for (size_t m = 0; m < models.size(); ++m) {
    if (models[m].key != entry.model_keys[m]) return false;
  }
  size_t module_at = 0, tensor_at = 0;
  bool same = true;
  auto tensor = [&](bool buffer, const std::string& key, const torch::Tensor& t) {
    if (!same) return;
    if (tensor_at >= entry.tensors.size()) {
      same = false;
      return;
    }
    TensorMark& mark = entry.tensors[tensor_at++];
    const c10::IntArrayRef sizes = t.sizes();
    if (mark.buffer != buffer || mark.impl != t.unsafeGetTensorImpl() || mark.dtype != t.scalar_type() ||
        mark.layout != t.layout() || mark.requires_grad != t.requires_grad() || mark.sizes_len != sizes.size() ||
        !std::equal(sizes.begin(), sizes.end(), entry.sizes.begin() + mark.sizes_at) || mark.key != key ||
        mark.data != (HasAliasableBytes(t) ? t.data_ptr() : nullptr)) {
      same = false;
      return;
    }
    if (mark.slot != nullptr) *mark.slot = t;
  };
  for (size_t m = 0; m < models.size() && same; ++m) {
    WalkModule(
        *models[m].module,
        [&](const std::string& prefix, const torch::nn::Module&) {
          if (!same) return;
          if (module_at >= entry.modules.size() || entry.modules[module_at].model != m ||
              entry.modules[module_at].first_tensor != tensor_at || entry.modules[module_at].prefix != prefix) {
            same = false;
            return;
          }
          ++module_at;
        },
        [&](const std::string&, const std::string& key, const torch::Tensor& t) { tensor(false, key, t); },
        [&](const std::string&, const std::string& key, const torch::Tensor& t) { tensor(true, key, t); });
  }
  return same && module_at == entry.modules.size() && tensor_at == entry.tensors.size();
}

Result<ContractCache::Entry> ContractCache::Build(const std::vector<NamedModel>& models) {
  Result<Contract> built = BuildContract(models);
  if (!built.ok()) return built.status();
  auto contract = std::make_unique<Contract>(std::move(built).value());
  // Each entry's tensor is the first of its group in walk order, so the
  // first mark with its TensorImpl (per kind) refills it.
  std::unordered_map<const c10::TensorImpl*, torch::Tensor*> param_slots, buffer_slots;
  param_slots.reserve(contract->trainable.size() + contract->frozen.size());
  for (auto* entries : {&contract->trainable, &contract->frozen}) {
    for (ContractEntry& entry : *entries) param_slots.emplace(entry.tensor.unsafeGetTensorImpl(), &entry.tensor);
  }
  for (ContractEntry& entry : contract->buffers) buffer_slots.emplace(entry.tensor.unsafeGetTensorImpl(), &entry.tensor);

  std::vector<ModuleMark> modules;
  std::vector<TensorMark> tensors;
  std::vector<int64_t> sizes;
  tensors.reserve(contract->param_ids.size() + contract->buffers.size());
  auto mark = [&](bool buffer, const std::string& key, const torch::Tensor& t) {
    TensorMark out;
    out.buffer = buffer;
    out.key = key;
    out.impl = t.unsafeGetTensorImpl();
    out.data = HasAliasableBytes(t) ? t.data_ptr() : nullptr;
    out.dtype = t.scalar_type();
    out.layout = t.layout();
    out.requires_grad = t.requires_grad();
    out.sizes_at = static_cast<uint32_t>(sizes.size());
    out.sizes_len = static_cast<uint32_t>(t.dim());
    sizes.insert(sizes.end(), t.sizes().begin(), t.sizes().end());
    auto& slots = buffer ? buffer_slots : param_slots;
    if (auto it = slots.find(out.impl); it != slots.end()) {
      out.slot = it->second;
      slots.erase(it);
    }
    tensors.push_back(std::move(out));
  };
  for (size_t m = 0; m < models.size(); ++m) {
    WalkModule(
        *models[m].module,
        [&](const std::string& prefix, const torch::nn::Module&) { modules.push_back({m, prefix, tensors.size()}); },
        [&](const std::string&, const std::string& key, const torch::Tensor& t) { mark(false, key, t); },
        [&](const std::string&, const std::string& key, const torch::Tensor& t) { mark(true, key, t); });
  }
  if (!param_slots.empty() || !buffer_slots.empty()) {
    // Every entry came from the walk BuildContract made; a representative
    // the second walk did not meet means the models changed in between.
    return Status::Aborted("the models changed while their contract was built");
  }
  Entry entry;
  for (const NamedModel& model : models) entry.model_keys.push_back(model.key);
  entry.modules = std::move(modules);
  entry.tensors = std::move(tensors);
  entry.sizes = std::move(sizes);
  entry.contract = std::move(contract);
  return entry;
}

void ContractCache::Drop(Entry& entry) {
  for (auto* entries : {&entry.contract->trainable, &entry.contract->frozen, &entry.contract->buffers}) {
    for (ContractEntry& e : *entries) e.tensor = torch::Tensor();
  }
}

void ContractCache::Release() {
  leased_ = false;
  if (!entries_.empty()) Drop(entries_.front());
}

}  // namespace trainsnap::internal
