// libFuzzer target: the chunk decoder (src/store/chunk_codec.h) on arbitrary
// stored values, plain and as deltas (with a separate base and with the
// base in the destination, as a restore decodes), and the encoder/decoder
// round trips (plane coded and single frame, plain and delta) on arbitrary
// raw bytes. Any crash, sanitizer report or broken invariant (abort) is a
// finding.
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
    // A delta onto a base of the right size: separate, then in place (only
    // where the header names one: other chunks ignore the base).
    if (header->filter == ChunkFilter::kXorDelta) {
      std::vector<uint8_t> base(header->raw_bytes, 0x5a);
      (void)DecodeChunk(encoded, out.data(), out.size(), base.data()).ok();
      (void)DecodeChunk(encoded, base.data(), base.size(), base.data()).ok();
    }
    // A destination of another size must be refused, not overrun.
    std::vector<uint8_t> small(header->raw_bytes / 2);
    if (DecodeChunk(encoded, small.data(), small.size()).ok() && small.size() != header->raw_bytes) std::abort();
  } else {
    std::vector<uint8_t> out(64);
    if (DecodeChunk(encoded, out.data(), out.size()).ok() && !header.ok()) std::abort();
  }
  // 2. Round trip: whatever the input, encode then decode gives it back.
  // data[0]: element size, plane coding, the 16-bit split.
  if (size >= 1) {
    ChunkEncodeOptions options;
    options.element_size = 1 + data[0] % kMaxElementSize;
    options.planes = (data[0] & 0x10) == 0;
    options.float16_split = (data[0] & 0x20) != 0;
    options.zstd_level = 1;
    std::string stored;
    if (!EncodeChunk(data + 1, size - 1, options, &stored).ok()) std::abort();
    std::vector<uint8_t> back(size - 1);
    if (!DecodeChunk(stored, back.data(), back.size()).ok()) std::abort();
    if (size > 1 && std::memcmp(back.data(), data + 1, size - 1) != 0) std::abort();
    // 3. The second half as a delta against the first, decoded in place.
    const size_t half = (size - 1) / 2;
    if (half > 0) {
      const uint8_t* base = data + 1;
      const uint8_t* next = data + 1 + half;
      if (!EncodeDeltaChunk(next, base, half, trainsnap::ChunkHash{}, 0, options, &stored).ok()) std::abort();
      std::vector<uint8_t> in_place(base, base + half);
      if (!DecodeChunk(stored, in_place.data(), half, in_place.data()).ok()) std::abort();
      if (std::memcmp(in_place.data(), next, half) != 0) std::abort();
    }
  }
  return 0;
}
