#include "store/delta_base_cache.h"

namespace trainsnap::internal {

void DeltaBaseCache::SetBudget(size_t bytes) {
  MutexLock lock(&mu_);
  budget_ = bytes;
}

size_t DeltaBaseCache::budget() const {
  MutexLock lock(&mu_);
  return budget_;
}

size_t DeltaBaseCache::held_bytes() const {
  MutexLock lock(&mu_);
  return held_;
}

std::shared_ptr<const DeltaBase> DeltaBaseCache::Find(const DeltaBaseKey& key) const {
  MutexLock lock(&mu_);
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second;
}

void DeltaBaseCache::Publish(std::vector<std::pair<DeltaBaseKey, std::shared_ptr<DeltaBase>>> entries) {
  MutexLock lock(&mu_);
  for (auto& [key, base] : entries) {
    // The key's node is reused: a capture replaces every tensor's entry,
    // and at 150,000 tensors erasing and inserting each cost a node and a
    // key copy (to scale linearly with the tensor count).
    auto [it, inserted] = entries_.try_emplace(key);
    if (!inserted) held_ -= it->second->RawBytes();
    if (held_ + base->RawBytes() > budget_) {
      base->raw.clear();
      base->raw.shrink_to_fit();
    }
    held_ += base->RawBytes();
    it->second = std::move(base);
  }
}

}  // namespace trainsnap::internal
