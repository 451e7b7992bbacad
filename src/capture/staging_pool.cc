#include "capture/staging_pool.h"

#include <utility>

namespace trainsnap::internal {

std::shared_ptr<StagingPool> StagingPool::Create(size_t max_bytes) {
  return std::shared_ptr<StagingPool>(new StagingPool(max_bytes == 0 ? kDefaultMaxBytes : max_bytes));
}

size_t StagingPool::SizeClass(size_t bytes) {
  constexpr size_t kMin = 4096;
  if (bytes <= kMin) return kMin;
  // Eight classes between consecutive powers of two.
  size_t top = 1;
  while (top <= bytes / 2) top *= 2;
  const size_t step = top / 8;
  return (bytes + step - 1) / step * step;
}

torch::Tensor StagingPool::Acquire(c10::IntArrayRef sizes, c10::ScalarType dtype, bool pinned,
                                   const std::shared_ptr<StagingOwner>& owner) {
  const size_t bytes = static_cast<size_t>(c10::multiply_integers(sizes)) * c10::elementSize(dtype);
  if (bytes == 0) return torch::empty(sizes, torch::TensorOptions().dtype(dtype));
  const size_t size_class = SizeClass(bytes);
  torch::Tensor backing;
  {
    MutexLock lock(&mu_);
    if (!Admissible(size_class, *owner)) {
      ++stats_.waits;
      while (!Admissible(size_class, *owner)) lock.Wait(released_);
    }
    auto it = free_.find({size_class, pinned});
    if (it != free_.end() && !it->second.empty()) {
      backing = std::move(it->second.back());
      it->second.pop_back();
      stats_.cached_bytes -= size_class;
      ++stats_.reuses;
    } else {
      // Make room: drop cached buffers until the new one fits in the bound.
      for (auto f = free_.begin(); f != free_.end() && stats_.in_use_bytes + stats_.cached_bytes + size_class > max_bytes_;) {
        while (!f->second.empty() && stats_.in_use_bytes + stats_.cached_bytes + size_class > max_bytes_) {
          f->second.pop_back();
          stats_.cached_bytes -= f->first.first;
        }
        f = f->second.empty() ? free_.erase(f) : std::next(f);
      }
      ++stats_.allocations;
    }
    stats_.in_use_bytes += size_class;
    owner->held += size_class;
    if (stats_.in_use_bytes > stats_.peak_in_use_bytes) stats_.peak_in_use_bytes = stats_.in_use_bytes;
  }
  if (!backing.defined()) {
    try {
      backing = torch::empty({static_cast<int64_t>(size_class)},
                             torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(pinned));
    } catch (...) {
      MutexLock lock(&mu_);
      stats_.in_use_bytes -= size_class;
      owner->held -= size_class;
      released_.notify_all();
      throw;
    }
  }
  void* data = backing.data_ptr();
  std::shared_ptr<StagingPool> self = shared_from_this();
  // The deleter keeps the pool, the owner and the backing buffer alive.
  return torch::from_blob(
      data, sizes,
      [self, backing, size_class, pinned, owner](void*) mutable {
        self->Release(std::move(backing), size_class, pinned, owner.get());
      },
      torch::TensorOptions().dtype(dtype));
}

bool StagingPool::Admissible(size_t size_class, const StagingOwner& owner) const {
  return stats_.in_use_bytes + size_class <= max_bytes_ || stats_.in_use_bytes == owner.held;
}

void StagingPool::Release(torch::Tensor backing, size_t size_class, bool pinned, StagingOwner* owner) {
  MutexLock lock(&mu_);
  stats_.in_use_bytes -= size_class;
  owner->held -= size_class;
  if (stats_.in_use_bytes + stats_.cached_bytes + size_class <= max_bytes_) {
    free_[{size_class, pinned}].push_back(std::move(backing));
    stats_.cached_bytes += size_class;
  }
  released_.notify_all();
}

torch::Tensor StagingSlabs::Acquire(StagingPool& pool, c10::IntArrayRef sizes, c10::ScalarType dtype, bool pinned,
                                    const std::shared_ptr<StagingOwner>& owner) {
  if (++requests_ <= kUnslabbed) return pool.Acquire(sizes, dtype, pinned, owner);
  return slabs_[pinned ? 1 : 0].Cut(sizes, dtype, [&] {
    return pool.Acquire({static_cast<int64_t>(kSlabBytes)}, torch::kUInt8, pinned, owner);
  });
}

uint8_t* StagingSlabs::CutBytes(StagingPool& pool, size_t bytes, const std::shared_ptr<StagingOwner>& owner,
                                std::vector<torch::Tensor>* keep) {
  if (requests_ < kUnslabbed) return nullptr;
  ++requests_;
  return slabs_[0].CutBytes(bytes, [&] {
    return pool.Acquire({static_cast<int64_t>(kSlabBytes)}, torch::kUInt8, /*pinned=*/false, owner);
  }, keep);
}

StagingPoolStats StagingPool::stats() const {
  MutexLock lock(&mu_);
  StagingPoolStats s = stats_;
  s.max_bytes = max_bytes_;
  return s;
}

}  // namespace trainsnap::internal
