#include "store/pack_entry.h"

#include "store/chunk_codec.h"

namespace trainsnap::internal {
namespace {

constexpr uint8_t kRawFlag = 0x01;

void PutLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLe(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(in[at + i])) << (8 * i);
  return v;
}

}  // namespace

std::string EncodePackEntry(const PackEntry& entry) {
  std::string out;
  out.reserve(kPackEntryBytes);
  out.push_back(static_cast<char>(kPackEntryMagic));
  out.push_back(static_cast<char>(kPackEntryVersion));
  out.push_back(static_cast<char>(entry.raw ? kRawFlag : 0));
  out.push_back('\0');
  PutLe(&out, entry.pack, 4);
  PutLe(&out, entry.offset, 8);
  PutLe(&out, entry.length, 4);
  PutLe(&out, entry.raw_bytes, 8);
  return out;
}

Result<PackEntry> ParsePackEntry(std::string_view value) {
  if (value.size() != kPackEntryBytes) {
    return Status::Corruption("chunk index entry has " + std::to_string(value.size()) + " bytes, expected " +
                              std::to_string(kPackEntryBytes));
  }
  if (static_cast<uint8_t>(value[0]) != kPackEntryMagic) return Status::Corruption("chunk index entry: bad magic");
  if (static_cast<uint8_t>(value[1]) != kPackEntryVersion) {
    return Status::Corruption("chunk index entry: unknown version " +
                              std::to_string(static_cast<uint8_t>(value[1])));
  }
  const auto flags = static_cast<uint8_t>(value[2]);
  if ((flags & ~kRawFlag) != 0 || value[3] != '\0') return Status::Corruption("chunk index entry: unknown flags");
  PackEntry e;
  e.raw = (flags & kRawFlag) != 0;
  e.pack = static_cast<uint32_t>(GetLe(value, 4, 4));
  e.offset = GetLe(value, 8, 8);
  e.length = static_cast<uint32_t>(GetLe(value, 16, 4));
  e.raw_bytes = GetLe(value, 20, 8);
  if (e.length < kChunkHeaderBytes) {
    return Status::Corruption("chunk index entry: length " + std::to_string(e.length) +
                              " is shorter than a chunk header");
  }
  if (e.raw && e.length != kChunkHeaderBytes + e.raw_bytes) {
    return Status::Corruption("chunk index entry: raw chunk of " + std::to_string(e.raw_bytes) + " bytes has length " +
                              std::to_string(e.length));
  }
  return e;
}

uint64_t StoredBytes(std::string_view index_value) {
  auto entry = ParsePackEntry(index_value);
  return entry.ok() ? entry->length : 0;
}

}  // namespace trainsnap::internal
