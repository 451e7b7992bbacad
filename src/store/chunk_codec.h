// Chunk codec: pure functions from raw chunk bytes to a stored value and
// back (docs/format.md, "Chunk values"). No I/O, no global state other than
// per-thread Zstd contexts; safe to call from any thread and to fuzz.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "store/byte_planes.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

// Header layout, version 1 (16 bytes, see docs/format.md).
inline constexpr uint8_t kChunkMagic = 0xC7;
inline constexpr uint8_t kChunkFormatVersion = 1;
inline constexpr size_t kChunkHeaderBytes = 16;
// Largest element size the shuffle filter accepts (complex128).
inline constexpr size_t kMaxElementSize = 16;
// A chunk is stored raw unless compression saves at least this fraction.
inline constexpr double kMinCompressionSaving = 0.03;

enum class ChunkCodec : uint8_t {
  kRaw = 0,
  kZstd = 1,  // the filtered chunk as one Zstd frame
  // The filtered chunk's byte planes, each stored raw or as its own Zstd
  // frame, behind a table of their stored lengths (docs/format.md, "Plane
  // coding"). Only with kShuffle, kFloat16Split, or kXorDelta over either.
  kPlanes = 2,
};
enum class ChunkFilter : uint8_t {
  kNone = 0,
  kShuffle = 1,  // byte-plane shuffle by element size
  // XOR against a base chunk (its hash opens the payload), then the inner
  // filter (header byte 6) and Zstd. Header byte 5 is the chain depth.
  kXorDelta = 2,
  // 16-bit floats (bf16, fp16): each value rotated left by one bit (the sign
  // moves to bit 0), then split into two byte planes. For bf16 the high
  // plane is exactly the exponent, the low one mantissa + sign.
  kFloat16Split = 3,
};

// Longest delta chain a chunk may have (header byte 5).
inline constexpr uint8_t kMaxDeltaDepth = 255;

struct ChunkHeader {
  uint8_t version = kChunkFormatVersion;
  ChunkCodec codec = ChunkCodec::kRaw;
  ChunkFilter filter = ChunkFilter::kNone;
  uint8_t element_size = 1;
  uint64_t raw_bytes = 0;
  // kXorDelta only: chain depth (1 = the base is not a delta), the filter
  // applied to the XOR bytes (kNone, kShuffle or kFloat16Split), the base's hash.
  uint8_t delta_depth = 0;
  ChunkFilter inner_filter = ChunkFilter::kNone;
  ChunkHash base;
};

struct ChunkEncodeOptions {
  bool compress = true;     // false: always the raw encoding (header + bytes)
  int zstd_level = 3;       // passed to ZSTD_compress
  size_t element_size = 1;  // 1..kMaxElementSize; the shuffle's plane count
  bool shuffle = true;      // apply the byte-plane shuffle when element_size > 1
  // With element_size 2 and shuffle: use kFloat16Split instead of kShuffle.
  bool float16_split = false;
  // Code the filtered chunk plane by plane (ChunkCodec::kPlanes): only the
  // planes whose estimated entropy is below kCodedPlaneBits go through Zstd.
  // false: the whole filtered chunk in one Zstd frame (kZstd, the encoding
  // of builds before format version 7; kept for comparison and tests).
  bool planes = true;
};

// A plane is entropy-coded when its estimated order-0 entropy is below this
// many bits per byte (saving at least 1/16 of it); others are stored raw.
// A uniformly random plane estimates at ~7.95 (plane_entropy.h).
inline constexpr double kCodedPlaneBits = 7.5;
// An XOR delta's coded plane estimated at this many bits per byte or more
// is compressed with the same accelerated parameters as a keyframe's
// planes; below it (near-zero planes: values that did not move) with the
// plain level-1 parameters, whose matches find the zero runs. Measured on
// the planes of trainsnap_bench's deltas (bench/README.md, "Deltas that pay
// for their restore"): fp32 weights' third plane (2.2 bits) ratio 0.327 ->
// 0.301 and decode 1.07 -> 2.01 GB/s with the acceleration; bf16 weights'
// low plane (0.88 bits) 0.170 -> 0.185, so it stays plain.
inline constexpr double kAcceleratedDeltaPlaneBits = 1.0;
// Whether a coded plane estimated at `bits` per byte gets the accelerated
// parameters: every plane of a keyframe chunk, a delta's from
// kAcceleratedDeltaPlaneBits on.
inline bool AcceleratePlane(bool delta, double bits) { return !delta || bits >= kAcceleratedDeltaPlaneBits; }

// Encodes `size` raw bytes into `out` (replacing its contents).
// InvalidArgument for a bad element size or level; never fails otherwise.
Status EncodeChunk(const void* raw, size_t size, const ChunkEncodeOptions& options, std::string* out);

// Encodes `raw` as an XOR delta against `base` (same size) whose hash is
// `base_hash` and whose own chain depth is `base_depth` (0 = not a delta).
// InvalidArgument when the depth would exceed kMaxDeltaDepth or for bad
// options. Unlike EncodeChunk it always compresses: the caller compares
// sizes and keeps the smaller of the two encodings.
Status EncodeDeltaChunk(const void* raw, const void* base, size_t size, const ChunkHash& base_hash,
                        uint8_t base_depth, const ChunkEncodeOptions& options, std::string* out);

// Estimated stored bytes of `raw` (XORed with `base` first when base is not
// null) encoded with `options`, from byte histograms of a sample
// (plane_entropy.h): no compression is run. Compares plain and delta
// encodings; accurate to a few percent on float training state. Options
// that EncodeChunk refuses estimate as `size` (nothing saved).
size_t EstimateEncodedSize(const void* raw, const void* base, size_t size, const ChunkEncodeOptions& options);

// Parses and validates the header. Corruption on a bad magic, unknown
// version/codec/filter, non-zero reserved bytes or a bad element size.
Result<ChunkHeader> ParseChunkHeader(std::string_view encoded);

// Decodes `encoded` into exactly dst_size bytes at dst. Corruption when the
// header is invalid, its raw length differs from dst_size, or Zstd fails or
// yields a different length. Does not check the hash (the caller does).
// A kXorDelta chunk needs `base`: the decoded (and hash-checked) raw bytes
// of the chunk its header names, dst_size bytes; without it: Corruption.
// `base` may equal `dst` (the restore decodes the base into the destination
// and applies the delta there); no other overlap is allowed.
Status DecodeChunk(std::string_view encoded, void* dst, size_t dst_size, const void* base = nullptr);

}  // namespace trainsnap::internal
