// The chunk index entry: where an encoded chunk lives in the pack files
// (docs/format.md, "Pack files"). Pure functions; the value of a `chunks`
// CF key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

inline constexpr uint8_t kPackEntryMagic = 0xC8;
inline constexpr uint8_t kPackEntryVersion = 1;
inline constexpr size_t kPackEntryBytes = 28;

struct PackEntry {
  uint32_t pack = 0;        // pack file number (pack-<8 hex digits>.pack)
  uint64_t offset = 0;      // of the encoded chunk (its header) in the pack
  uint32_t length = 0;      // encoded bytes: chunk header + payload
  uint64_t raw_bytes = 0;   // decoded bytes
  // The chunk is stored raw (codec raw, filter none): its payload, the
  // raw_bytes after the 16-byte chunk header, is the data itself, so a read
  // goes straight into the destination.
  bool raw = false;

  uint64_t end() const { return offset + length; }
  bool operator==(const PackEntry& o) const {
    return pack == o.pack && offset == o.offset && length == o.length && raw_bytes == o.raw_bytes && raw == o.raw;
  }
};

// A chunk a snapshot writer appended to the packs, for its commit to index.
struct NewChunk {
  ChunkHash hash;
  PackEntry entry;
  std::optional<ChunkHash> base;  // a delta chunk's base (its chunk_deps entry)
};

std::string EncodePackEntry(const PackEntry& entry);
// Corruption (naming what is wrong) for a value of the wrong size, magic or
// version, unknown flags, a zero length, or a raw entry whose length is not
// the chunk header plus raw_bytes.
Result<PackEntry> ParsePackEntry(std::string_view value);
// The encoded length an index entry (a chunks CF value) records; 0 when it
// does not parse (callers that need more use ParsePackEntry).
uint64_t StoredBytes(std::string_view index_value);

}  // namespace trainsnap::internal
