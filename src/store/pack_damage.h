// PackDamage: a pack file that the chunk index names and that does not hold
// what the index places in it (missing, or shorter than its last indexed
// chunk's end). Pure functions; the store decides what follows (writers
// stop deduplicating onto the chunks in it, compaction leaves it alone,
// verify and gc name the snapshots that need them; docs/reliability.md,
// "Damaged packs").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "store/pack_entry.h"
#include "store/pack_set.h"

namespace trainsnap::internal {

struct PackDamage {
  uint32_t pack = 0;
  std::optional<uint64_t> size;  // the file's size; none when it is missing
  uint64_t needed = 0;           // end of the last chunk the index places in it

  // Whether `entry`'s bytes are (wholly or partly) not in the file.
  bool Covers(const PackEntry& entry) const { return entry.pack == pack && (!size || entry.end() > *size); }
  // "packs/pack-00000001.pack is missing", or "... has 100 bytes, the chunk
  // index places chunks up to byte 200".
  std::string Describe() const;
  bool operator==(const PackDamage& o) const { return pack == o.pack && size == o.size && needed == o.needed; }
};

// The packs of `needed` (pack -> end of its last indexed chunk) that
// `files` (the pack files present) lack or hold shorter, by pack number.
std::vector<PackDamage> FindPackDamage(const std::map<uint32_t, uint64_t>& needed,
                                       const std::vector<PackSet::FileInfo>& files);

}  // namespace trainsnap::internal
