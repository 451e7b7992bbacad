// Chunk codec: pure functions from raw chunk bytes to a stored value and
// back (docs/format.md, "Chunk values"). No I/O, no global state other than
// per-thread Zstd contexts; safe to call from any thread and to fuzz.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "trainsnap/status.h"

namespace trainsnap::internal {

// Header layout, version 1 (16 bytes, see docs/format.md).
inline constexpr uint8_t kChunkMagic = 0xC7;
inline constexpr uint8_t kChunkFormatVersion = 1;
inline constexpr size_t kChunkHeaderBytes = 16;
// Largest element size the shuffle filter accepts (complex128).
inline constexpr size_t kMaxElementSize = 16;
// A chunk is stored raw unless compression saves at least this fraction.
inline constexpr double kMinCompressionSaving = 0.03;

enum class ChunkCodec : uint8_t { kRaw = 0, kZstd = 1 };
enum class ChunkFilter : uint8_t {
  kNone = 0,
  kShuffle = 1,  // byte-plane shuffle by element size
  // 2 is reserved for "xor-delta against a base chunk" (issue 6).
};

struct ChunkHeader {
  uint8_t version = kChunkFormatVersion;
  ChunkCodec codec = ChunkCodec::kRaw;
  ChunkFilter filter = ChunkFilter::kNone;
  uint8_t element_size = 1;
  uint64_t raw_bytes = 0;
};

struct ChunkEncodeOptions {
  int zstd_level = 3;       // passed to ZSTD_compress
  size_t element_size = 1;  // 1..kMaxElementSize; the shuffle's plane count
  bool shuffle = true;      // apply the byte-plane shuffle when element_size > 1
};

// Byte-plane shuffle: out[b * n + i] = in[i * width + b] for the n = size /
// width whole elements; a trailing partial element is copied unchanged.
// `in` and `out` must not overlap.
void ShuffleBytes(const uint8_t* in, size_t size, size_t width, uint8_t* out);
void UnshuffleBytes(const uint8_t* in, size_t size, size_t width, uint8_t* out);

// Encodes `size` raw bytes into `out` (replacing its contents).
// InvalidArgument for a bad element size or level; never fails otherwise.
Status EncodeChunk(const void* raw, size_t size, const ChunkEncodeOptions& options, std::string* out);

// Parses and validates the header. Corruption on a bad magic, unknown
// version/codec/filter, non-zero reserved bytes or a bad element size.
Result<ChunkHeader> ParseChunkHeader(std::string_view encoded);

// Decodes `encoded` into exactly dst_size bytes at dst. Corruption when the
// header is invalid, its raw length differs from dst_size, or Zstd fails or
// yields a different length. Does not check the hash (the caller does).
Status DecodeChunk(std::string_view encoded, void* dst, size_t dst_size);

}  // namespace trainsnap::internal
