// libFuzzer target: the chunk decoder (src/store/chunk_codec.h) on arbitrary
// stored values, and the encoder/decoder round trip on arbitrary raw bytes.
// Any crash, sanitizer report or broken invariant (abort) is a finding.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "store/chunk_codec.h"

using namespace trainsnap::internal;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view encoded(reinterpret_cast<const char*>(data), size);
  // 1. Decoding a (probably damaged) stored value: typed error or bytes.
  auto header = ParseChunkHeader(encoded);
  if (header.ok() && header->raw_bytes <= (size_t{4} << 20)) {
    std::vector<uint8_t> out(header->raw_bytes);
    (void)DecodeChunk(encoded, out.data(), out.size()).ok();
    // A destination of another size must be refused, not overrun.
    std::vector<uint8_t> small(header->raw_bytes / 2);
    if (DecodeChunk(encoded, small.data(), small.size()).ok() && small.size() != header->raw_bytes) std::abort();
  } else {
    std::vector<uint8_t> out(64);
    if (DecodeChunk(encoded, out.data(), out.size()).ok() && !header.ok()) std::abort();
  }
  // 2. Round trip: whatever the input, encode then decode gives it back.
  if (size >= 1) {
    ChunkEncodeOptions options;
    options.element_size = 1 + data[0] % kMaxElementSize;
    options.zstd_level = 1;
    std::string stored;
    if (!EncodeChunk(data + 1, size - 1, options, &stored).ok()) std::abort();
    std::vector<uint8_t> back(size - 1);
    if (!DecodeChunk(stored, back.data(), back.size()).ok()) std::abort();
    if (size > 1 && std::memcmp(back.data(), data + 1, size - 1) != 0) std::abort();
  }
  return 0;
}
