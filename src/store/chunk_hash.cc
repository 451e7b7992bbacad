#include "store/chunk_hash.h"

#include <cstring>

#include <xxhash.h>

namespace trainsnap {

std::string ChunkHash::Hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

namespace internal {

ChunkHash HashChunk(const void* data, size_t size) {
  XXH128_canonical_t canonical;
  // XXH3 reads nothing when size is 0, but the pointer must not be null.
  static const char kEmpty = 0;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(size ? data : &kEmpty, size));
  static_assert(sizeof(canonical.digest) == 16);
  ChunkHash hash;
  std::memcpy(hash.bytes.data(), canonical.digest, 16);
  return hash;
}

}  // namespace internal
}  // namespace trainsnap
