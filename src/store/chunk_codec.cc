#include "store/chunk_codec.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

// For ZSTD_c_literalCompressionMode and ZSTD_ps_enable (CompressPlane), in
// zstd.h's experimental section (zstd >= 1.5.1; Debian's is 1.5.4).
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "store/plane_entropy.h"
#include "store/thread_scratch.h"

namespace trainsnap::internal {
namespace {

struct CCtxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DCtxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// One context per thread: creating a Zstd context costs more than
// compressing a small chunk, and contexts are not thread-safe.
ZSTD_CCtx* ThreadCCtx() {
  thread_local std::unique_ptr<ZSTD_CCtx, CCtxDeleter> ctx(ZSTD_createCCtx());
  return ctx.get();
}
ZSTD_DCtx* ThreadDCtx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxDeleter> ctx(ZSTD_createDCtx());
  return ctx.get();
}

// Per-thread buffers, reused across chunks: the filtered (shuffled or
// split) bytes, and the XOR of a chunk with its delta base. Two, because a
// delta is XORed first and then filtered.
std::vector<uint8_t>& ThreadFilterScratch() {
  thread_local std::vector<uint8_t> scratch;
  return scratch;
}

void WriteHeader(const ChunkHeader& h, uint8_t* out) {
  out[0] = kChunkMagic;
  out[1] = h.version;
  out[2] = static_cast<uint8_t>(h.codec);
  out[3] = static_cast<uint8_t>(h.filter);
  out[4] = h.element_size;
  const bool delta = h.filter == ChunkFilter::kXorDelta;
  out[5] = delta ? h.delta_depth : 0;
  out[6] = delta ? static_cast<uint8_t>(h.inner_filter) : 0;
  out[7] = 0;  // reserved
  for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<uint8_t>((h.raw_bytes >> (8 * i)) & 0xff);
}

void AppendRaw(const ChunkHeader& h, const void* raw, size_t size, std::string* out) {
  out->resize(kChunkHeaderBytes + size);
  WriteHeader(h, reinterpret_cast<uint8_t*>(out->data()));
  if (size) std::memcpy(out->data() + kChunkHeaderBytes, raw, size);
}

}  // namespace

namespace {

// The filter EncodeChunk applies for these options.
ChunkFilter ChosenFilter(const ChunkEncodeOptions& options) {
  if (!options.shuffle || options.element_size <= 1) return ChunkFilter::kNone;
  if (options.float16_split && options.element_size == 2) return ChunkFilter::kFloat16Split;
  return ChunkFilter::kShuffle;
}

void ApplyFilter(ChunkFilter filter, size_t width, const uint8_t* in, size_t size, uint8_t* out) {
  if (filter == ChunkFilter::kFloat16Split) return SplitFloat16(in, size, out);
  ShuffleBytes(in, size, filter == ChunkFilter::kShuffle ? width : 1, out);
}

// The planes of a filtered chunk: count, bytes per plane; the rest of the
// chunk (size - count * plane_bytes bytes) is the unfiltered tail.
struct PlaneLayout {
  size_t count = 1;
  size_t plane_bytes = 0;
};

PlaneLayout LayoutOf(ChunkFilter filter, size_t element_size, size_t size) {
  const size_t width = filter == ChunkFilter::kFloat16Split ? 2 : filter == ChunkFilter::kShuffle ? element_size : 1;
  if (width <= 1) return {1, size};
  return {width, size / width};
}

// Removes the filter from a planar chunk (plane b at planes[b], then the
// tail) into dst; with xor_base not null, XORed with it in the same pass
// (xor_base may equal dst).
void RemoveFilter(ChunkFilter filter, const PlaneLayout& layout, const uint8_t* const* planes, const uint8_t* tail,
                  size_t size, const uint8_t* xor_base, uint8_t* dst) {
  if (filter == ChunkFilter::kFloat16Split) {
    return UnsplitFloat16Planes(planes[0], planes[1], tail, size, xor_base, dst);
  }
  UnshufflePlanes(planes, tail, size, layout.count, xor_base, dst);
}

Status CheckOptions(const ChunkEncodeOptions& options) {
  if (options.element_size < 1 || options.element_size > kMaxElementSize) {
    return Status::InvalidArgument("chunk element size " + std::to_string(options.element_size) +
                                   " is outside 1.." + std::to_string(kMaxElementSize));
  }
  if (options.zstd_level < ZSTD_minCLevel() || options.zstd_level > ZSTD_maxCLevel()) {
    return Status::InvalidArgument("zstd level " + std::to_string(options.zstd_level) + " is out of range");
  }
  return Status::OK();
}

std::vector<uint8_t>& ThreadXorScratch() {
  thread_local std::vector<uint8_t> scratch;
  return scratch;
}

// Plane coding uses a table of one little-endian uint32 stored length per
// plane; a plane is stored raw exactly when its stored length equals its
// raw length (a coded plane is always shorter).
constexpr size_t kPlaneLengthBytes = 4;

void PutLength(uint32_t v, char* out) {
  for (size_t i = 0; i < kPlaneLengthBytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint32_t GetLength(const char* in) {
  uint32_t v = 0;
  for (size_t i = kPlaneLengthBytes; i-- > 0;) v = (v << 8) | static_cast<uint8_t>(in[i]);
  return v;
}

// Whether a plane estimated at `bits` per byte is worth a Zstd frame.
bool CodePlane(double bits) { return bits < kCodedPlaneBits; }

// Zstd's parameters for a plane at `level`; a Zstd error code or 0. At the
// store's default level 1 the fast strategy looks for matches of 7 bytes or
// more in a 128-entry table: the planes worth coding are float exponents
// (and XOR deltas), low-entropy noise whose short matches cost time and
// save nothing, so nearly everything becomes Huffman-coded literals.
// Measured on a 256 KiB fp32 exponent plane (bench/README.md, "Plane
// coding"): 180 -> ~850 MB/s, ratio 0.39 -> 0.34. `accelerate` adds the fast
// strategy's acceleration (targetLength: the match finder skips ahead the
// longer it finds nothing) with the literals still Huffman-coded (Zstd
// turns that off with acceleration unless told): 512 KiB bf16 and fp32
// exponent planes 0.80-0.87 -> 1.03-1.09 GB/s at the same ratio. Not for
// the planes of an XOR delta below kAcceleratedDeltaPlaneBits: they are
// long zero runs that only the matches find (bf16 small updates: ratio
// 34.8 -> 18.0 with it). Other levels keep Zstd's parameters.
constexpr int kPlaneAcceleration = 64;
size_t SetPlaneParameters(ZSTD_CCtx* c, int level, bool accelerate) {
  size_t r = ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters);
  if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
  if (level != 1) return r;
  if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(c, ZSTD_c_minMatch, 7);
  if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(c, ZSTD_c_hashLog, 7);
  if (!ZSTD_isError(r) && accelerate) r = ZSTD_CCtx_setParameter(c, ZSTD_c_strategy, ZSTD_fast);
  if (!ZSTD_isError(r) && accelerate) r = ZSTD_CCtx_setParameter(c, ZSTD_c_targetLength, kPlaneAcceleration);
  if (!ZSTD_isError(r) && accelerate) {
    r = ZSTD_CCtx_setParameter(c, ZSTD_c_literalCompressionMode, ZSTD_ps_enable);
  }
  return r;
}

// One plane as a Zstd frame; a Zstd error code on failure. Without the
// acceleration when libzstd refuses a parameter it needs (the experimental
// literal mode): the frame is the same format either way.
size_t CompressPlane(const uint8_t* plane, size_t size, int level, bool accelerate, char* dst, size_t capacity) {
  ZSTD_CCtx* c = ThreadCCtx();
  size_t r = SetPlaneParameters(c, level, accelerate);
  if (ZSTD_isError(r) && accelerate) r = SetPlaneParameters(c, level, /*accelerate=*/false);
  if (ZSTD_isError(r)) return r;
  return ZSTD_compress2(c, dst, capacity, plane, size);
}

// Appends, after the first `prefix` bytes of `out`, the plane table and the
// planes of `input` (already XORed for a delta): planes estimated
// compressible go through Zstd (kept only if that saves
// kMinCompressionSaving), the others and the tail are copied. `delta`:
// the input is an XOR delta (CompressPlane's acceleration only for its
// planes of kAcceleratedDeltaPlaneBits or more).
void AppendPlanes(const uint8_t* input, size_t size, ChunkFilter filter, size_t element_size, int level, bool delta,
                  const double* bits, size_t prefix, std::string* out) {
  const PlaneLayout layout = LayoutOf(filter, element_size, size);
  std::vector<uint8_t>& filtered = ThreadFilterScratch();
  ScratchTrim trim(filtered);
  filtered.resize(size);
  ApplyFilter(filter, element_size, input, size, filtered.data());
  size_t capacity = prefix + layout.count * kPlaneLengthBytes + (size - layout.count * layout.plane_bytes);
  for (size_t b = 0; b < layout.count; ++b) {
    capacity += CodePlane(bits[b]) ? ZSTD_compressBound(layout.plane_bytes) : layout.plane_bytes;
  }
  out->resize(capacity);
  size_t pos = prefix + layout.count * kPlaneLengthBytes;
  const double keep_below = static_cast<double>(layout.plane_bytes) * (1.0 - kMinCompressionSaving);
  for (size_t b = 0; b < layout.count; ++b) {
    const uint8_t* plane = filtered.data() + b * layout.plane_bytes;
    size_t stored = layout.plane_bytes;
    if (CodePlane(bits[b])) {
      const size_t c = CompressPlane(plane, layout.plane_bytes, level, AcceleratePlane(delta, bits[b]),
                                     out->data() + pos, capacity - pos);
      if (!ZSTD_isError(c) && static_cast<double>(c) < keep_below) stored = c;
    }
    if (stored == layout.plane_bytes && stored) std::memcpy(out->data() + pos, plane, stored);
    PutLength(static_cast<uint32_t>(stored), out->data() + prefix + b * kPlaneLengthBytes);
    pos += stored;
  }
  const size_t tail = size - layout.count * layout.plane_bytes;
  if (tail) std::memcpy(out->data() + pos, filtered.data() + layout.count * layout.plane_bytes, tail);
  out->resize(pos + tail);
}

// Whether plane coding applies: a filter with planes, planes the uint32
// table can describe, and at least one whole element.
bool UsePlanes(const ChunkEncodeOptions& options, ChunkFilter filter, size_t size) {
  return options.planes && filter != ChunkFilter::kNone && size >= options.element_size &&
         size / options.element_size <= UINT32_MAX;
}

void EstimateBits(const uint8_t* raw, const uint8_t* base, size_t size, const ChunkEncodeOptions& options,
                  ChunkFilter filter, double* bits) {
  EstimatePlaneBits(raw, base, size, filter == ChunkFilter::kNone ? 1 : options.element_size,
                    filter == ChunkFilter::kFloat16Split, bits);
}

}  // namespace

Status EncodeDeltaChunk(const void* raw, const void* base, size_t size, const ChunkHash& base_hash,
                        uint8_t base_depth, const ChunkEncodeOptions& options, std::string* out) {
  TRAINSNAP_RETURN_IF_ERROR(CheckOptions(options));
  if (base_depth >= kMaxDeltaDepth) {
    return Status::InvalidArgument("delta base depth " + std::to_string(base_depth) + " leaves no room for a delta");
  }
  ChunkHeader header;
  header.codec = ChunkCodec::kZstd;
  header.filter = ChunkFilter::kXorDelta;
  header.element_size = static_cast<uint8_t>(options.element_size);
  header.raw_bytes = size;
  header.delta_depth = static_cast<uint8_t>(base_depth + 1);
  header.inner_filter = ChosenFilter(options);
  header.base = base_hash;
  std::vector<uint8_t>& xored = ThreadXorScratch();
  ScratchTrim xored_trim(xored);
  xored.resize(size);
  XorBytes(static_cast<const uint8_t*>(raw), static_cast<const uint8_t*>(base), size, xored.data());
  const size_t prefix = kChunkHeaderBytes + base_hash.bytes.size();
  if (UsePlanes(options, header.inner_filter, size)) {
    header.codec = ChunkCodec::kPlanes;
    double bits[kMaxElementSize];
    EstimateBits(xored.data(), nullptr, size, options, header.inner_filter, bits);
    AppendPlanes(xored.data(), size, header.inner_filter, options.element_size, options.zstd_level, /*delta=*/true,
                 bits, prefix, out);
  } else {
    const uint8_t* input = xored.data();
    std::vector<uint8_t>& filtered = ThreadFilterScratch();
    ScratchTrim filtered_trim(filtered);
    if (header.inner_filter != ChunkFilter::kNone) {
      filtered.resize(size);
      ApplyFilter(header.inner_filter, options.element_size, xored.data(), size, filtered.data());
      input = filtered.data();
    }
    const size_t bound = ZSTD_compressBound(size);
    out->resize(prefix + bound);
    const size_t compressed =
        ZSTD_compressCCtx(ThreadCCtx(), out->data() + prefix, bound, input, size, options.zstd_level);
    if (ZSTD_isError(compressed)) {
      return Status::Aborted(std::string("zstd compress of a delta chunk: ") + ZSTD_getErrorName(compressed));
    }
    out->resize(prefix + compressed);
  }
  WriteHeader(header, reinterpret_cast<uint8_t*>(out->data()));
  std::memcpy(out->data() + kChunkHeaderBytes, base_hash.bytes.data(), base_hash.bytes.size());
  return Status::OK();
}

size_t EstimateEncodedSize(const void* raw, const void* base, size_t size, const ChunkEncodeOptions& options) {
  if (size == 0) return 0;
  // Options EncodeChunk refuses (an element size beyond the planes' table):
  // no compression is expected.
  if (!CheckOptions(options).ok()) return size;
  const ChunkFilter filter = ChosenFilter(options);
  double bits[kMaxElementSize];
  EstimateBits(static_cast<const uint8_t*>(raw), static_cast<const uint8_t*>(base), size, options, filter, bits);
  const PlaneLayout layout = LayoutOf(filter, options.element_size, size);
  if (layout.plane_bytes == 0) return size;
  // A coded plane costs its entropy plus Zstd's frame and table (~1 %);
  // the whole-chunk frame of ChunkCodec::kZstd is estimated the same way.
  double estimate = static_cast<double>(size - layout.count * layout.plane_bytes);
  for (size_t b = 0; b < layout.count; ++b) {
    const double plane = static_cast<double>(layout.plane_bytes);
    estimate += CodePlane(bits[b]) ? std::min(plane, plane * bits[b] / 8.0 * 1.01 + 16.0) : plane;
  }
  return static_cast<size_t>(estimate);
}

Status EncodeChunk(const void* raw, size_t size, const ChunkEncodeOptions& options, std::string* out) {
  TRAINSNAP_RETURN_IF_ERROR(CheckOptions(options));
  ChunkHeader header;
  header.element_size = static_cast<uint8_t>(options.element_size);
  header.raw_bytes = size;
  if (size == 0 || !options.compress) {
    AppendRaw(header, raw, size, out);
    return Status::OK();
  }
  const uint8_t* input = static_cast<const uint8_t*>(raw);
  const ChunkFilter filter = ChosenFilter(options);
  const double raw_limit = static_cast<double>(size) * (1.0 - kMinCompressionSaving);
  if (UsePlanes(options, filter, size)) {
    double bits[kMaxElementSize];
    EstimateBits(input, nullptr, size, options, filter, bits);
    // Nothing worth coding: raw, without shuffling or compressing anything.
    if (std::none_of(bits, bits + LayoutOf(filter, options.element_size, size).count, CodePlane)) {
      AppendRaw(header, raw, size, out);
      return Status::OK();
    }
    AppendPlanes(input, size, filter, options.element_size, options.zstd_level, /*delta=*/false, bits,
                 kChunkHeaderBytes, out);
    if (static_cast<double>(out->size()) > raw_limit) {
      AppendRaw(header, raw, size, out);
      return Status::OK();
    }
    header.codec = ChunkCodec::kPlanes;
    header.filter = filter;
    WriteHeader(header, reinterpret_cast<uint8_t*>(out->data()));
    return Status::OK();
  }

  std::vector<uint8_t>& scratch = ThreadFilterScratch();
  ScratchTrim trim(scratch);
  if (filter != ChunkFilter::kNone) {
    scratch.resize(size);
    ApplyFilter(filter, options.element_size, input, size, scratch.data());
    input = scratch.data();
  }
  const size_t bound = ZSTD_compressBound(size);
  out->resize(kChunkHeaderBytes + bound);
  const size_t compressed =
      ZSTD_compressCCtx(ThreadCCtx(), out->data() + kChunkHeaderBytes, bound, input, size, options.zstd_level);
  if (ZSTD_isError(compressed) || static_cast<double>(compressed + kChunkHeaderBytes) > raw_limit) {
    // Incompressible (or Zstd refused): raw bytes decode faster and cost at most 3% more.
    AppendRaw(header, raw, size, out);
    return Status::OK();
  }
  header.codec = ChunkCodec::kZstd;
  header.filter = filter;
  WriteHeader(header, reinterpret_cast<uint8_t*>(out->data()));
  out->resize(kChunkHeaderBytes + compressed);
  return Status::OK();
}

Result<ChunkHeader> ParseChunkHeader(std::string_view encoded) {
  if (encoded.size() < kChunkHeaderBytes) {
    return Status::Corruption("chunk value has " + std::to_string(encoded.size()) + " bytes, shorter than its " +
                              std::to_string(kChunkHeaderBytes) + "-byte header");
  }
  const auto* p = reinterpret_cast<const uint8_t*>(encoded.data());
  if (p[0] != kChunkMagic) return Status::Corruption("chunk header: bad magic byte " + std::to_string(p[0]));
  if (p[1] != kChunkFormatVersion) {
    return Status::Corruption("chunk header: unknown format version " + std::to_string(p[1]));
  }
  ChunkHeader h;
  h.version = p[1];
  if (p[2] > static_cast<uint8_t>(ChunkCodec::kPlanes)) {
    return Status::Corruption("chunk header: unknown codec " + std::to_string(p[2]));
  }
  h.codec = static_cast<ChunkCodec>(p[2]);
  if (p[3] > static_cast<uint8_t>(ChunkFilter::kFloat16Split)) {
    return Status::Corruption("chunk header: unknown filter " + std::to_string(p[3]));
  }
  h.filter = static_cast<ChunkFilter>(p[3]);
  if (p[4] < 1 || p[4] > kMaxElementSize) {
    return Status::Corruption("chunk header: bad element size " + std::to_string(p[4]));
  }
  h.element_size = p[4];
  if (h.filter == ChunkFilter::kXorDelta) {
    if (p[5] == 0) return Status::Corruption("chunk header: delta chunk with chain depth 0");
    if (p[6] > static_cast<uint8_t>(ChunkFilter::kFloat16Split) || p[6] == static_cast<uint8_t>(ChunkFilter::kXorDelta)) {
      return Status::Corruption("chunk header: bad inner filter " + std::to_string(p[6]) + " of a delta chunk");
    }
    if (p[7]) return Status::Corruption("chunk header: reserved bytes are not zero");
    h.delta_depth = p[5];
    h.inner_filter = static_cast<ChunkFilter>(p[6]);
    if (h.codec == ChunkCodec::kRaw) return Status::Corruption("chunk header: delta chunk stored raw");
    if (encoded.size() < kChunkHeaderBytes + h.base.bytes.size()) {
      return Status::Corruption("chunk header: delta chunk too short for its base hash");
    }
    std::memcpy(h.base.bytes.data(), p + kChunkHeaderBytes, h.base.bytes.size());
  } else if (p[5] || p[6] || p[7]) {
    return Status::Corruption("chunk header: reserved bytes are not zero");
  }
  const ChunkFilter planar = h.filter == ChunkFilter::kXorDelta ? h.inner_filter : h.filter;
  if (planar == ChunkFilter::kFloat16Split && h.element_size != 2) {
    return Status::Corruption("chunk header: 16-bit float split with element size " + std::to_string(p[4]));
  }
  if (h.codec == ChunkCodec::kPlanes && (planar == ChunkFilter::kNone || h.element_size < 2)) {
    return Status::Corruption("chunk header: plane coding without byte planes (filter " +
                              std::to_string(static_cast<int>(planar)) + ", element size " + std::to_string(p[4]) +
                              ")");
  }
  h.raw_bytes = 0;
  for (int i = 7; i >= 0; --i) h.raw_bytes = (h.raw_bytes << 8) | p[8 + i];
  if (h.codec == ChunkCodec::kRaw && h.filter != ChunkFilter::kNone) {
    return Status::Corruption("chunk header: raw chunk with a filter");
  }
  if (h.codec == ChunkCodec::kRaw && encoded.size() - kChunkHeaderBytes != h.raw_bytes) {
    return Status::Corruption("chunk header: raw length " + std::to_string(h.raw_bytes) + " but payload has " +
                              std::to_string(encoded.size() - kChunkHeaderBytes) + " bytes");
  }
  return h;
}

namespace {

// Corruption unless `frame` declares exactly `size` bytes of content
// (checked before any buffer is sized for it: a damaged header must not
// make the reader allocate what it claims).
Status CheckFrameSize(std::string_view frame, size_t size, const char* what) {
  const unsigned long long frame_size = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (frame_size != size) {
    // Also covers ZSTD_CONTENTSIZE_ERROR / _UNKNOWN: our frames always record it.
    return Status::Corruption(std::string(what) + " zstd frame does not declare the expected length " +
                              std::to_string(size));
  }
  return Status::OK();
}

// Decompresses one Zstd frame that must hold exactly `size` bytes.
Status DecompressExactly(std::string_view frame, uint8_t* dst, size_t size, const char* what) {
  TRAINSNAP_RETURN_IF_ERROR(CheckFrameSize(frame, size, what));
  const size_t got = ZSTD_decompressDCtx(ThreadDCtx(), dst, size, frame.data(), frame.size());
  if (ZSTD_isError(got)) return Status::Corruption(std::string(what) + " zstd: " + ZSTD_getErrorName(got));
  if (got != size) {
    return Status::Corruption(std::string(what) + " zstd: decoded " + std::to_string(got) + " bytes, expected " +
                              std::to_string(size));
  }
  return Status::OK();
}

// ChunkCodec::kPlanes: reads the table, decompresses the coded planes into
// `scratch`, points at the raw ones where they lie, then removes the filter
// (and applies the delta) in one pass into dst.
Status DecodePlanes(const ChunkHeader& h, ChunkFilter filter, std::string_view payload, uint8_t* dst, size_t size,
                    const uint8_t* xor_base, std::vector<uint8_t>* scratch) {
  const PlaneLayout layout = LayoutOf(filter, h.element_size, size);
  const size_t table = layout.count * kPlaneLengthBytes;
  if (payload.size() < table) return Status::Corruption("plane-coded chunk: payload shorter than its plane table");
  // First the whole table is checked against the payload (and every coded
  // plane's declared length), so that a damaged value sizes no buffer.
  const uint8_t* planes[kMaxElementSize];
  size_t offsets[kMaxElementSize];
  size_t stored_lengths[kMaxElementSize];
  bool any_coded = false;
  size_t pos = table;
  for (size_t b = 0; b < layout.count; ++b) {
    const size_t stored = GetLength(payload.data() + b * kPlaneLengthBytes);
    if (stored > layout.plane_bytes || stored > payload.size() - pos) {
      return Status::Corruption("plane-coded chunk: plane " + std::to_string(b) + " stores " + std::to_string(stored) +
                                " bytes, more than its " + std::to_string(layout.plane_bytes) +
                                " raw bytes or the payload holds");
    }
    if (stored < layout.plane_bytes) {
      TRAINSNAP_RETURN_IF_ERROR(
          CheckFrameSize(payload.substr(pos, stored), layout.plane_bytes, "plane-coded chunk: plane"));
      any_coded = true;
    }
    offsets[b] = pos;
    stored_lengths[b] = stored;
    pos += stored;
  }
  const size_t tail = size - layout.count * layout.plane_bytes;
  if (payload.size() - pos != tail) {
    return Status::Corruption("plane-coded chunk: " + std::to_string(payload.size() - pos) +
                              " bytes after the planes, expected a tail of " + std::to_string(tail));
  }
  if (any_coded && scratch->size() < layout.count * layout.plane_bytes) {
    scratch->resize(layout.count * layout.plane_bytes);
  }
  for (size_t b = 0; b < layout.count; ++b) {
    const auto* at = reinterpret_cast<const uint8_t*>(payload.data() + offsets[b]);
    if (stored_lengths[b] == layout.plane_bytes) {
      planes[b] = at;
      continue;
    }
    uint8_t* plane = scratch->data() + b * layout.plane_bytes;
    TRAINSNAP_RETURN_IF_ERROR(DecompressExactly(payload.substr(offsets[b], stored_lengths[b]), plane,
                                                layout.plane_bytes, "plane-coded chunk: plane"));
    planes[b] = plane;
  }
  RemoveFilter(filter, layout, planes, reinterpret_cast<const uint8_t*>(payload.data() + pos), size, xor_base, dst);
  return Status::OK();
}

}  // namespace

Status DecodeChunk(std::string_view encoded, void* dst, size_t dst_size, const void* base) {
  TRAINSNAP_ASSIGN_OR_RETURN(ChunkHeader h, ParseChunkHeader(encoded));
  if (h.raw_bytes != dst_size) {
    return Status::Corruption("chunk raw length " + std::to_string(h.raw_bytes) + " differs from the expected " +
                              std::to_string(dst_size));
  }
  const bool delta = h.filter == ChunkFilter::kXorDelta;
  if (delta && base == nullptr) {
    return Status::Corruption("delta chunk (base " + h.base.Hex() + "): decoded without its base");
  }
  const std::string_view payload = encoded.substr(kChunkHeaderBytes + (delta ? h.base.bytes.size() : 0));
  auto* out = static_cast<uint8_t*>(dst);
  if (h.codec == ChunkCodec::kRaw) {
    if (dst_size) std::memcpy(dst, payload.data(), dst_size);
    return Status::OK();
  }
  const ChunkFilter filter = delta ? h.inner_filter : h.filter;
  const auto* xor_base = static_cast<const uint8_t*>(delta ? base : nullptr);
  std::vector<uint8_t>& scratch = ThreadFilterScratch();
  ScratchTrim trim(scratch);
  if (h.codec == ChunkCodec::kPlanes) return DecodePlanes(h, filter, payload, out, dst_size, xor_base, &scratch);
  // ChunkCodec::kZstd: one frame of the filtered chunk. Straight into dst
  // when there is neither a filter nor a delta to apply (the base may be
  // dst, so a delta never decompresses there).
  const PlaneLayout layout = LayoutOf(filter, h.element_size, dst_size);
  if (layout.count == 1 && !delta) return DecompressExactly(payload, out, dst_size, "chunk");
  TRAINSNAP_RETURN_IF_ERROR(CheckFrameSize(payload, dst_size, "chunk"));
  scratch.resize(dst_size);
  TRAINSNAP_RETURN_IF_ERROR(DecompressExactly(payload, scratch.data(), dst_size, "chunk"));
  const uint8_t* planes[kMaxElementSize];
  for (size_t b = 0; b < layout.count; ++b) planes[b] = scratch.data() + b * layout.plane_bytes;
  RemoveFilter(filter, layout, planes, scratch.data() + layout.count * layout.plane_bytes, dst_size, xor_base, out);
  return Status::OK();
}

}  // namespace trainsnap::internal
