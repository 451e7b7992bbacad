#include "capture/change_tracker.h"

namespace trainsnap::internal {

std::optional<ChangeTracker::Identity> ChangeTracker::IdentityOf(const torch::Tensor& tensor) {
  // Tensors that require grad are what optimizers update, and LibTorch's SGD
  // does so through `.data()`, which does not bump the version counter.
  if (!tensor.defined() || tensor.is_inference() || tensor.requires_grad()) return std::nullopt;
  Identity id;
  id.impl.emplace(tensor.getIntrusivePtr());
  id.data = tensor.data_ptr();
  id.sizes = tensor.sizes().vec();
  id.strides = tensor.strides().vec();
  id.dtype = tensor.scalar_type();
  id.device = tensor.device();
  id.version = static_cast<int64_t>(tensor._version());
  return id;
}

bool ChangeTracker::Same(const Identity& a, const Identity& b) {
  // Comparing the weak pointers' targets: a live impl at the recorded address
  // is the recorded impl, because the weak reference keeps that address taken.
  return a.impl && b.impl && a.impl->_unsafe_get_target() == b.impl->_unsafe_get_target() && !a.impl->expired() &&
         a.data == b.data &&
         a.sizes == b.sizes && a.strides == b.strides && a.dtype == b.dtype && a.device == b.device &&
         a.version == b.version;
}

Status ChangeTracker::BeginCapture(Store& store, int64_t step) {
  MutexLock lock(&mu_);
  pending_[step].clear();
  if (!committed_step_) return Status::OK();
  Result<bool> stored = store.Contains(*committed_step_);
  if (!stored.ok()) {
    return stored.status().WithContext("check that step " + std::to_string(*committed_step_) + " is still stored");
  }
  if (!*stored) {
    committed_.clear();
    committed_step_.reset();
  }
  return Status::OK();
}

std::optional<int64_t> ChangeTracker::Observe(int64_t step, uint64_t param_id, const std::string& role,
                                              const torch::Tensor& tensor) {
  std::optional<Identity> id = IdentityOf(tensor);
  if (!id) return std::nullopt;
  MutexLock lock(&mu_);
  Key key(param_id, role);
  std::optional<int64_t> from;
  auto it = committed_.find(key);
  if (it != committed_.end() && Same(it->second.identity, *id)) from = it->second.step;
  pending_[step][key] = std::move(*id);
  return from;
}

void ChangeTracker::Committed(int64_t step) {
  MutexLock lock(&mu_);
  auto it = pending_.find(step);
  if (it == pending_.end()) return;
  committed_.clear();
  for (auto& [key, identity] : it->second) committed_[key] = Reference{std::move(identity), step};
  committed_step_ = step;
  pending_.erase(it);
}

void ChangeTracker::Abandoned(int64_t step) {
  MutexLock lock(&mu_);
  pending_.erase(step);
}

void ChangeTracker::Reset() {
  MutexLock lock(&mu_);
  committed_.clear();
  committed_step_.reset();
  pending_.clear();
}

}  // namespace trainsnap::internal
