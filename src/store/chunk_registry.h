// In-memory bookkeeping of the writable store about chunks: which hashes live
// writers hold (GC must not delete them), and the stored size of chunks known
// to be present (so that dedup does not read a chunk's value to learn it).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

struct ChunkHashHasher {
  size_t operator()(const ChunkHash& h) const {
    size_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | h.bytes[i];
    return v;
  }
};

// Thread-safe.
class ChunkRegistry {
 public:
  // Pins `hash` (GC skips it until Unpin) and returns its stored size if the
  // chunk is known to be in the store. Pinning happens before the caller's
  // existence check, so a concurrent GC cannot delete a chunk it dedups against.
  std::optional<uint64_t> PinAndLookup(const ChunkHash& hash);
  void Unpin(const std::vector<ChunkHash>& hashes);
  // Records that the store now holds `hash` with `stored_bytes` encoded bytes.
  void NoteStored(const ChunkHash& hash, uint64_t stored_bytes);

  // Removes the pinned hashes from `candidates`, then calls `erase` with the
  // rest while holding the lock (so no writer can pin one of them between
  // the check and the deletion) and forgets their sizes when it succeeds.
  Status EraseUnpinned(std::vector<ChunkHash>* candidates,
                       const std::function<Status(const std::vector<ChunkHash>&)>& erase);

  // Forgets every known size (pins stay): after the database was reopened,
  // presence must be asked of RocksDB again.
  void ForgetSizes();

  size_t pinned() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<ChunkHash, int, ChunkHashHasher> pins_;
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> known_sizes_;
};

}  // namespace trainsnap::internal
