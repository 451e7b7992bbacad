// DeltaBaseCache: the raw bytes of each tensor's delta bases (its latest
// committed version, or its latest keyframe chunks), kept in memory by the
// writable store so that the next snapshot can encode a changed chunk as the
// XOR with its base without reading the base back from the database
// (docs/format.md, "Delta chunks").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "store/record_key.h"

#include "trainsnap/store.h"

namespace trainsnap::internal {

// Depth recorded for a chunk whose chain depth this process does not know
// (e.g. it was deduplicated against a chunk written by an earlier process):
// the next version of that chunk is then written as a keyframe.
inline constexpr uint8_t kUnknownDeltaDepth = 255;

// Per chunk of a tensor: the chunk the next version's delta would be taken
// against. With DeltaReference::kParent that is always the latest version;
// with kKeyframe it is the latest keyframe, and `ages` counts the deltas
// written against it since.
struct DeltaBase {
  DType dtype = DType::kUnknown;
  uint64_t bytes = 0;
  size_t chunk = 0;  // chunk length used when it was cut
  std::vector<ChunkHash> hashes;
  std::vector<uint8_t> depths;  // chain depth per chunk (0 = keyframe)
  std::vector<uint8_t> ages;    // kKeyframe: deltas written against the chunk
  // The base chunks' raw bytes, one buffer per chunk; empty when they did
  // not fit the cache's budget (the next version is then written without
  // deltas). With kKeyframe, a chunk written as a delta shares its
  // keyframe's buffer with the previous DeltaBase instead of copying it: a
  // capture of deltas copies (and allocates) no base bytes at all. Measured
  // (bench/README.md, "Plane coding"): the per-capture copy of the whole
  // tensor, into fresh memory, was a third of a dense capture's encode CPU.
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> raw;
  // Bytes held by `raw`.
  size_t RawBytes() const {
    size_t total = 0;
    for (const auto& chunk : raw) total += chunk ? chunk->size() : 0;
    return total;
  }
};

using DeltaBaseKey = RecordKey;

// Thread-safe.
class DeltaBaseCache {
 public:
  // Upper bound on the raw bytes held. Entries beyond it keep their hashes
  // and depths but drop their bytes.
  void SetBudget(size_t bytes);
  size_t budget() const;
  std::shared_ptr<const DeltaBase> Find(const DeltaBaseKey& key) const;
  // Replaces the entries of these keys (called after a successful commit).
  void Publish(std::vector<std::pair<DeltaBaseKey, std::shared_ptr<DeltaBase>>> entries);
  size_t held_bytes() const;

 private:
  mutable Mutex mu_;
  size_t budget_ GUARDED_BY(mu_) = 0;
  size_t held_ GUARDED_BY(mu_) = 0;
  // Hashed: every capture looks up and replaces every tensor's entry, and
  // at 150,000 string-keyed entries an ordered map's descent grew faster
  // than the count (to scale linearly with the tensor count).
  std::unordered_map<DeltaBaseKey, std::shared_ptr<const DeltaBase>, RecordKeyHash> entries_ GUARDED_BY(mu_);
};

}  // namespace trainsnap::internal
