// In-memory bookkeeping of the writable store about chunks: which hashes live
// writers hold (GC must not delete them), the stored size of chunks known
// to be present (so that dedup does not read a chunk's value to learn it),
// and the chunks live writers appended to the packs but no commit indexed
// yet (so that a second writer of the same bytes reuses the first one's
// encoding instead of writing another).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/mutex.h"
#include "store/pack_entry.h"
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

// A chunk a live writer appended and no commit has indexed yet.
struct InFlightChunk {
  NewChunk chunk;     // its pack place and (a delta's) base
  uint8_t depth = 0;  // its delta chain depth
};

// Thread-safe.
class ChunkRegistry {
 public:
  // Known sizes held at most (about 56 bytes each: a 48-byte node and a
  // bucket): every chunk a process writes is noted, so without a bound the
  // table grew by a node per new chunk for as long as no snapshot was
  // deleted (150,000 per capture of 50,000 parameters with Adam), and each
  // look-up missed the cache more often the larger it was (issue 18: linear
  // scaling). Past the bound the table starts afresh (freed whole, once per
  // million new chunks): a forgotten size is asked of RocksDB again.
  static constexpr size_t kDefaultMaxKnownSizes = size_t{1} << 20;
  explicit ChunkRegistry(size_t max_known_sizes = kDefaultMaxKnownSizes) : max_known_sizes_(max_known_sizes) {}

  // Pins `hash` (GC skips it until Unpin) and returns its stored size if the
  // chunk is known to be in the store. Pinning happens before the caller's
  // existence check, so a concurrent GC cannot delete a chunk it dedups against.
  std::optional<uint64_t> PinAndLookup(const ChunkHash& hash);
  void Unpin(const std::vector<ChunkHash>& hashes);
  // Records that the store holds `hash` with `stored_bytes` encoded bytes
  // (its index entry was read); ignored for an unusable chunk.
  void NoteStored(const ChunkHash& hash, uint64_t stored_bytes);
  // A commit indexed a new copy of `hash`: it is stored, and usable again.
  void NoteIndexed(const ChunkHash& hash, uint64_t stored_bytes);

  // Chunks known to be unreadable: their pack file is missing or shorter
  // than their index entry, their bytes failed their hash, or they are
  // deltas of such a chunk. A writer never deduplicates onto one (nothing
  // reports it stored), so a capture writes its bytes again, and the commit
  // that indexes the new copy makes it usable (NoteIndexed). Returns how
  // many were not marked before.
  size_t MarkUnusable(const std::vector<ChunkHash>& hashes);
  bool Unusable(const ChunkHash& hash) const;
  // How many chunks are marked unusable (0: the cheap test of a whole store).
  size_t unusable() const;

  // Removes the pinned hashes from `candidates`, then calls `erase` with the
  // rest while holding the lock (so no writer can pin one of them between
  // the check and the deletion) and forgets their sizes when it succeeds.
  Status EraseUnpinned(std::vector<ChunkHash>* candidates,
                       const std::function<Status(const std::vector<ChunkHash>&)>& erase);

  // In-flight chunks. Every writer that indexes an in-flight chunk indexes
  // the same encoding (the first one appended), so a delta's base never
  // changes its encoding under the delta, and the bytes are written once.
  // Each call below that returns a chunk takes a reference for the caller,
  // which ReleaseInFlight gives back; the chunk leaves the registry with its
  // last reference. While referenced, its pack is not compacted
  // (OldestInFlightPack), so every holder can still commit it.
  //
  // The in-flight chunk `hash`, if a live writer appended one.
  std::optional<InFlightChunk> AcquireInFlight(const ChunkHash& hash);
  // Registers `chunk`, just appended by the caller, unless another writer
  // registered the same hash first: returns the registered one.
  InFlightChunk RegisterInFlight(const InFlightChunk& chunk);
  void ReleaseInFlight(const std::vector<ChunkHash>& hashes);
  // The lowest pack number holding a referenced in-flight chunk.
  std::optional<uint32_t> OldestInFlightPack() const;

  // Forgets every known size (pins stay): after the database was reopened,
  // presence must be asked of RocksDB again.
  void ForgetSizes();

  size_t pinned() const;
  size_t known_sizes() const;

 private:
  const size_t max_known_sizes_;
  mutable Mutex mu_;
  std::unordered_map<ChunkHash, int, ChunkHashHasher> pins_ GUARDED_BY(mu_);
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> known_sizes_ GUARDED_BY(mu_);
  struct InFlightEntry {
    InFlightChunk chunk;
    int references = 0;
  };
  std::unordered_map<ChunkHash, InFlightEntry, ChunkHashHasher> in_flight_ GUARDED_BY(mu_);
  std::unordered_set<ChunkHash, ChunkHashHasher> unusable_ GUARDED_BY(mu_);
  std::atomic<size_t> unusable_count_{0};  // unusable_.size(), read without mu_
};

}  // namespace trainsnap::internal
