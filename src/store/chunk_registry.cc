#include "store/chunk_registry.h"

namespace trainsnap::internal {

std::optional<uint64_t> ChunkRegistry::PinAndLookup(const ChunkHash& hash) {
  MutexLock lock(&mu_);
  ++pins_[hash];
  auto it = known_sizes_.find(hash);
  if (it == known_sizes_.end()) return std::nullopt;
  return it->second;
}

void ChunkRegistry::Unpin(const std::vector<ChunkHash>& hashes) {
  MutexLock lock(&mu_);
  for (const ChunkHash& h : hashes) {
    auto it = pins_.find(h);
    if (it != pins_.end() && --it->second == 0) pins_.erase(it);
  }
}

void ChunkRegistry::NoteStored(const ChunkHash& hash, uint64_t stored_bytes) {
  MutexLock lock(&mu_);
  if (unusable_count_.load(std::memory_order_relaxed) > 0 && unusable_.count(hash) > 0) return;
  if (auto it = known_sizes_.find(hash); it != known_sizes_.end()) {
    it->second = stored_bytes;
    return;
  }
  if (known_sizes_.size() >= max_known_sizes_) known_sizes_.clear();
  known_sizes_.emplace(hash, stored_bytes);
}

void ChunkRegistry::NoteIndexed(const ChunkHash& hash, uint64_t stored_bytes) {
  {
    MutexLock lock(&mu_);
    if (unusable_count_.load(std::memory_order_relaxed) > 0 && unusable_.erase(hash) > 0) {
      unusable_count_.store(unusable_.size(), std::memory_order_relaxed);
    }
  }
  NoteStored(hash, stored_bytes);
}

size_t ChunkRegistry::MarkUnusable(const std::vector<ChunkHash>& hashes) {
  MutexLock lock(&mu_);
  size_t marked = 0;
  for (const ChunkHash& h : hashes) {
    known_sizes_.erase(h);
    marked += unusable_.insert(h).second ? 1 : 0;
  }
  unusable_count_.store(unusable_.size(), std::memory_order_relaxed);
  return marked;
}

bool ChunkRegistry::Unusable(const ChunkHash& hash) const {
  if (unusable_count_.load(std::memory_order_relaxed) == 0) return false;
  MutexLock lock(&mu_);
  return unusable_.count(hash) > 0;
}

size_t ChunkRegistry::unusable() const { return unusable_count_.load(std::memory_order_relaxed); }

Status ChunkRegistry::EraseUnpinned(std::vector<ChunkHash>* candidates,
                                    const std::function<Status(const std::vector<ChunkHash>&)>& erase) {
  MutexLock lock(&mu_);
  size_t kept = 0;
  for (const ChunkHash& h : *candidates) {
    if (pins_.count(h) == 0) (*candidates)[kept++] = h;
  }
  candidates->resize(kept);
  if (candidates->empty()) return Status::OK();
  TRAINSNAP_RETURN_IF_ERROR(erase(*candidates));
  for (const ChunkHash& h : *candidates) {
    known_sizes_.erase(h);
    unusable_.erase(h);  // gone from the store: a later copy is a new chunk
  }
  unusable_count_.store(unusable_.size(), std::memory_order_relaxed);
  return Status::OK();
}

std::optional<InFlightChunk> ChunkRegistry::AcquireInFlight(const ChunkHash& hash) {
  MutexLock lock(&mu_);
  auto it = in_flight_.find(hash);
  if (it == in_flight_.end()) return std::nullopt;
  ++it->second.references;
  return it->second.chunk;
}

InFlightChunk ChunkRegistry::RegisterInFlight(const InFlightChunk& chunk) {
  MutexLock lock(&mu_);
  auto it = in_flight_.try_emplace(chunk.chunk.hash, InFlightEntry{chunk, 0}).first;
  ++it->second.references;
  return it->second.chunk;
}

void ChunkRegistry::ReleaseInFlight(const std::vector<ChunkHash>& hashes) {
  MutexLock lock(&mu_);
  for (const ChunkHash& h : hashes) {
    auto it = in_flight_.find(h);
    if (it != in_flight_.end() && --it->second.references == 0) in_flight_.erase(it);
  }
}

std::optional<uint32_t> ChunkRegistry::OldestInFlightPack() const {
  MutexLock lock(&mu_);
  std::optional<uint32_t> oldest;
  for (const auto& [hash, entry] : in_flight_) {
    const uint32_t pack = entry.chunk.chunk.entry.pack;
    if (!oldest || pack < *oldest) oldest = pack;
  }
  return oldest;
}

void ChunkRegistry::ForgetSizes() {
  MutexLock lock(&mu_);
  known_sizes_.clear();
}

size_t ChunkRegistry::pinned() const {
  MutexLock lock(&mu_);
  return pins_.size();
}

size_t ChunkRegistry::known_sizes() const {
  MutexLock lock(&mu_);
  return known_sizes_.size();
}

}  // namespace trainsnap::internal
