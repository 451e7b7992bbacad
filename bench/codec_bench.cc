// Chunk codec micro-benchmarks (Google Benchmark), single-threaded, so every
// rate is per core: XXH3-128 hashing, and encode/decode of one default-size
// (1 MiB) chunk of normally distributed fp32 and bf16 values, through the
// store's codec with and without the byte-plane shuffle, against plain Zstd at
// the same level. The `ratio` counter is raw bytes / stored bytes.
// Also: the 16-bit float split (filter 3) against the plain shuffle on bf16
// and fp16 weights and Adam second moments, and XOR-delta encode/decode of a
// chunk against its previous version after one small optimizer-like update.
// Plane coding (ChunkCodec::kPlanes, format version 7) is measured beside
// the whole-chunk Zstd frame of format version 6 (*_frame, planes:0).
//
// Add a data set: append to kDataSets. Add a codec variant: append to kVariants.

#include <benchmark/benchmark.h>
#include <xxhash.h>
#include <zstd.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "store/chunk_codec.h"

namespace trainsnap::internal {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;  // the store's default chunk size

std::vector<float> NormalFloats(size_t n) {
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> Fp32Data() {
  auto f = NormalFloats(kChunkBytes / 4);
  std::vector<uint8_t> out(kChunkBytes);
  std::memcpy(out.data(), f.data(), kChunkBytes);
  return out;
}

// bf16 = the high half of an fp32, rounded to nearest even (as LibTorch does).
std::vector<uint8_t> Bf16Data() {
  auto f = NormalFloats(kChunkBytes / 2);
  std::vector<uint8_t> out(kChunkBytes);
  for (size_t i = 0; i < f.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &f[i], 4);
    const uint16_t bf = static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
    std::memcpy(&out[i * 2], &bf, 2);
  }
  return out;
}

uint16_t ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

// fp32 Adam state: exp_avg (a running mean of gradients, N(0, 1e-3)) and
// exp_avg_sq (squares of gradients: positive, a wide exponent range).
std::vector<uint8_t> Fp32AdamMData() {
  auto f = NormalFloats(kChunkBytes / 4);
  for (float& x : f) x *= 1e-3f;
  std::vector<uint8_t> out(kChunkBytes);
  std::memcpy(out.data(), f.data(), kChunkBytes);
  return out;
}

std::vector<uint8_t> Fp32AdamVData() {
  auto f = NormalFloats(kChunkBytes / 4);
  for (float& x : f) x = x * x * 1e-6f;
  std::vector<uint8_t> out(kChunkBytes);
  std::memcpy(out.data(), f.data(), kChunkBytes);
  return out;
}

// Adam's exp_avg_sq: squares of small gradients, positive, a wide exponent range.
std::vector<uint8_t> Bf16AdamVData() {
  auto f = NormalFloats(kChunkBytes / 2);
  std::vector<uint8_t> out(kChunkBytes);
  for (size_t i = 0; i < f.size(); ++i) {
    const uint16_t bf = ToBf16(f[i] * f[i] * 1e-6f);
    std::memcpy(&out[i * 2], &bf, 2);
  }
  return out;
}

// fp16 weights of a typical scale (0.02 * N(0, 1)).
std::vector<uint8_t> Fp16Data() {
  auto f = NormalFloats(kChunkBytes / 2);
  std::vector<uint8_t> out(kChunkBytes);
  for (size_t i = 0; i < f.size(); ++i) {
    // Round-to-nearest fp32 -> fp16 for normal values (|x| < 65504, > 6e-5).
    uint32_t bits;
    const float x = f[i] * 0.02f;
    std::memcpy(&bits, &x, 4);
    const uint32_t sign = (bits >> 16) & 0x8000;
    int32_t exp = static_cast<int32_t>((bits >> 23) & 0xff) - 127 + 15;
    uint32_t mant = bits & 0x7fffff;
    uint16_t h;
    if (exp <= 0) {
      h = static_cast<uint16_t>(sign);  // flush tiny values to zero
    } else {
      uint32_t v = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
      if ((mant & 0x1fff) > 0x1000 || ((mant & 0x1fff) == 0x1000 && (v & 1))) ++v;
      h = static_cast<uint16_t>(sign | v);
    }
    std::memcpy(&out[i * 2], &h, 2);
  }
  return out;
}

struct DataSet {
  const char* name;
  size_t element_size;
  std::vector<uint8_t> (*make)();
};
const DataSet kDataSets[] = {
    {"fp32_normal", 4, &Fp32Data},
    {"fp32_adam_m", 4, &Fp32AdamMData},
    {"fp32_adam_v", 4, &Fp32AdamVData},
    {"bf16_normal", 2, &Bf16Data},
    {"bf16_adam_v", 2, &Bf16AdamVData},
    {"fp16_weights", 2, &Fp16Data},
};

// codec_planes / codec_f16split: what the store writes (format version 7:
// plane coding). The *_frame variants: the same filter as one Zstd frame
// (format version 6). plain_zstd: Zstd alone, the peer.
enum class Variant { kShuffle, kShuffleFrame, kNoShuffle, kPlainZstd, kFloat16Split, kFloat16SplitFrame };
struct VariantInfo {
  const char* name;
  Variant variant;
};
const VariantInfo kVariants[] = {
    {"codec_planes", Variant::kShuffle},
    {"codec_shuffle_frame", Variant::kShuffleFrame},
    {"codec_noshuffle", Variant::kNoShuffle},
    {"plain_zstd", Variant::kPlainZstd},
    {"codec_f16split", Variant::kFloat16Split},             // 16-bit data sets only
    {"codec_f16split_frame", Variant::kFloat16SplitFrame},  // 16-bit data sets only
};
bool Float16Only(Variant v) { return v == Variant::kFloat16Split || v == Variant::kFloat16SplitFrame; }

std::string Encode(const std::vector<uint8_t>& raw, const DataSet& data, Variant variant, int level) {
  std::string out;
  if (variant == Variant::kPlainZstd) {
    out.resize(ZSTD_compressBound(raw.size()));
    out.resize(ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), level));
    return out;
  }
  ChunkEncodeOptions o;
  o.zstd_level = level;
  o.element_size = data.element_size;
  o.shuffle = variant != Variant::kNoShuffle;
  o.float16_split = Float16Only(variant);
  o.planes = variant == Variant::kShuffle || variant == Variant::kFloat16Split;
  if (!EncodeChunk(raw.data(), raw.size(), o, &out).ok()) std::abort();
  return out;
}

void BM_Xxh3_128(benchmark::State& state) {
  const auto data = Fp32Data();
  for (auto _ : state) benchmark::DoNotOptimize(XXH3_128bits(data.data(), data.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * data.size()));
}

void BM_Shuffle(benchmark::State& state, const DataSet& data) {
  const auto raw = data.make();
  std::vector<uint8_t> out(raw.size());
  for (auto _ : state) {
    ShuffleBytes(raw.data(), raw.size(), data.element_size, out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * raw.size()));
}

void BM_Encode(benchmark::State& state, const DataSet& data, Variant variant) {
  const int level = static_cast<int>(state.range(0));
  const auto raw = data.make();
  std::string encoded;
  for (auto _ : state) {
    encoded = Encode(raw, data, variant, level);
    benchmark::DoNotOptimize(encoded.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * raw.size()));
  state.counters["ratio"] = static_cast<double>(raw.size()) / static_cast<double>(encoded.size());
}

void BM_Decode(benchmark::State& state, const DataSet& data, Variant variant) {
  const int level = static_cast<int>(state.range(0));
  const auto raw = data.make();
  const std::string encoded = Encode(raw, data, variant, level);
  std::vector<uint8_t> out(raw.size());
  for (auto _ : state) {
    if (variant == Variant::kPlainZstd) {
      benchmark::DoNotOptimize(ZSTD_decompress(out.data(), out.size(), encoded.data(), encoded.size()));
    } else if (!DecodeChunk(encoded, out.data(), out.size()).ok()) {
      state.SkipWithError("decode failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  if (out != raw) state.SkipWithError("round trip differs");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * raw.size()));
  state.counters["ratio"] = static_cast<double>(raw.size()) / static_cast<double>(encoded.size());
}

// A chunk and its next version after one small update: fp32 weights times
// (1 + 1e-4 * N(0, 1)) (like a low learning rate), or bf16 weights with
// an additive 1e-4 * N(0, 1) update rounded back to bf16 (most values do not
// change at all).
struct DeltaPair {
  std::vector<uint8_t> before, after;
  size_t element_size;
};

// fp32 weights times (1 + relative * N(0, 1)).
DeltaPair Fp32PairOf(float relative) {
  auto w = NormalFloats(kChunkBytes / 4);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 1.f);
  DeltaPair p{std::vector<uint8_t>(kChunkBytes), std::vector<uint8_t>(kChunkBytes), 4};
  for (float& x : w) x *= 0.02f;
  std::memcpy(p.before.data(), w.data(), kChunkBytes);
  for (float& x : w) x *= 1.f + relative * dist(rng);
  std::memcpy(p.after.data(), w.data(), kChunkBytes);
  return p;
}
DeltaPair Fp32Pair() { return Fp32PairOf(1e-4f); }
// Several steps from the keyframe (trainsnap_bench's dense weights at step
// 8 against step 1): the XOR's third plane holds 2-3 bits per byte, coded
// with the accelerated parameters (kAcceleratedDeltaPlaneBits).
DeltaPair Fp32DriftPair() { return Fp32PairOf(3e-3f); }

DeltaPair Bf16Pair() {
  auto w = NormalFloats(kChunkBytes / 2);
  std::mt19937 rng(8);
  std::normal_distribution<float> dist(0.f, 1.f);
  DeltaPair p{std::vector<uint8_t>(kChunkBytes), std::vector<uint8_t>(kChunkBytes), 2};
  for (size_t i = 0; i < w.size(); ++i) {
    const float x = w[i] * 0.02f;
    const uint16_t a = ToBf16(x);
    uint32_t bits = static_cast<uint32_t>(a) << 16;
    float xa;
    std::memcpy(&xa, &bits, 4);
    const uint16_t b = ToBf16(xa + 1e-4f * dist(rng) * 0.02f);
    std::memcpy(&p.before[i * 2], &a, 2);
    std::memcpy(&p.after[i * 2], &b, 2);
  }
  return p;
}

struct DeltaSet {
  const char* name;
  DeltaPair (*make)();
};
const DeltaSet kDeltaSets[] = {
    {"fp32_small_update", &Fp32Pair}, {"fp32_drift", &Fp32DriftPair}, {"bf16_small_update", &Bf16Pair}};

// planes: plane coding (format version 7) or one Zstd frame (version 6).
// Level 1, the store's default (StoreOptions::zstd_level 0).
ChunkEncodeOptions DeltaOptions(const DeltaPair& p, bool planes = true) {
  ChunkEncodeOptions o;
  o.zstd_level = 1;
  o.element_size = p.element_size;
  o.float16_split = p.element_size == 2;
  o.planes = planes;
  return o;
}

// Encode of the new version as a delta; `plain_ratio` is the same chunk
// encoded without the delta, for comparison.
void BM_EncodeDelta(benchmark::State& state, const DeltaSet& set) {
  const DeltaPair p = set.make();
  const ChunkEncodeOptions o = DeltaOptions(p, state.range(0) != 0);
  const ChunkHash base{};
  std::string encoded, plain;
  for (auto _ : state) {
    if (!EncodeDeltaChunk(p.after.data(), p.before.data(), p.after.size(), base, 0, o, &encoded).ok()) std::abort();
    benchmark::DoNotOptimize(encoded.data());
  }
  if (!EncodeChunk(p.after.data(), p.after.size(), o, &plain).ok()) std::abort();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * p.after.size()));
  state.counters["ratio"] = static_cast<double>(p.after.size()) / static_cast<double>(encoded.size());
  state.counters["plain_ratio"] = static_cast<double>(p.after.size()) / static_cast<double>(plain.size());
}

// The timed loop of the decode benchmarks: `decode(out)` per iteration,
// then the round trip checked against `expected`.
template <typename Decode>
void TimeDecodes(benchmark::State& state, const std::vector<uint8_t>& expected, Decode decode) {
  std::vector<uint8_t> out(expected.size());
  for (auto _ : state) {
    if (!decode(out.data(), out.size())) {
      state.SkipWithError("decode failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  if (out != expected) state.SkipWithError("round trip differs");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * expected.size()));
}

std::string EncodeOrDie(const std::vector<uint8_t>& raw, const ChunkEncodeOptions& o) {
  std::string out;
  if (!EncodeChunk(raw.data(), raw.size(), o, &out).ok()) std::abort();
  return out;
}

std::string EncodeDeltaOrDie(const DeltaPair& p, const ChunkEncodeOptions& o) {
  std::string out;
  if (!EncodeDeltaChunk(p.after.data(), p.before.data(), p.after.size(), ChunkHash{}, 0, o, &out).ok()) std::abort();
  return out;
}

void BM_DecodeDelta(benchmark::State& state, const DeltaSet& set) {
  const DeltaPair p = set.make();
  const std::string delta = EncodeDeltaOrDie(p, DeltaOptions(p, state.range(0) != 0));
  TimeDecodes(state, p.after, [&](uint8_t* out, size_t size) {
    return DecodeChunk(delta, out, size, p.before.data()).ok();
  });
}

// What a restore does for a delta chunk (ChunkStore::ReadChunkInto): decode
// the base (a keyframe chunk) into the destination, then the delta onto it
// in place. Compare with BM_DecodeKeyframe, the same base decoded alone.
void BM_RestoreDeltaChunk(benchmark::State& state, const DeltaSet& set) {
  const DeltaPair p = set.make();
  const ChunkEncodeOptions o = DeltaOptions(p, state.range(0) != 0);
  const std::string base = EncodeOrDie(p.before, o), delta = EncodeDeltaOrDie(p, o);
  TimeDecodes(state, p.after, [&](uint8_t* out, size_t size) {
    return DecodeChunk(base, out, size).ok() && DecodeChunk(delta, out, size, out).ok();
  });
}

void BM_DecodeKeyframe(benchmark::State& state, const DeltaSet& set) {
  const DeltaPair p = set.make();
  const std::string base = EncodeOrDie(p.before, DeltaOptions(p, state.range(0) != 0));
  TimeDecodes(state, p.before, [&](uint8_t* out, size_t size) { return DecodeChunk(base, out, size).ok(); });
}

// The writer's per-chunk decision: estimate the plain and the XORed
// encoding from byte histograms (nothing is compressed).
void BM_DeltaEstimate(benchmark::State& state, const DeltaSet& set) {
  const DeltaPair p = set.make();
  const ChunkEncodeOptions o = DeltaOptions(p);
  for (auto _ : state) {
    benchmark::DoNotOptimize(EstimateEncodedSize(p.after.data(), nullptr, p.after.size(), o));
    benchmark::DoNotOptimize(EstimateEncodedSize(p.after.data(), p.before.data(), p.after.size(), o));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * p.after.size()));
}

// Small tensors: the first `bytes` bytes of a delta pair,
// i.e. a whole tensor of that size in one chunk. Counters are exact stored
// sizes of the new version: `plain_bytes` (EncodeChunk: shuffle/split + Zstd,
// or raw when Zstd saves < 3 %) and `delta_bytes` (EncodeDeltaChunk plus the
// 32-byte chunk_deps entry a delta adds: 16-byte key, 16-byte value). The
// timed loop is the writer's work for a delta candidate: both encodings.
void BM_SmallDelta(benchmark::State& state, const DeltaSet& set) {
  const DeltaPair p = set.make();
  const ChunkEncodeOptions o = DeltaOptions(p);
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::string plain, delta;
  for (auto _ : state) {
    if (!EncodeChunk(p.after.data(), bytes, o, &plain).ok()) std::abort();
    if (!EncodeDeltaChunk(p.after.data(), p.before.data(), bytes, ChunkHash{}, 0, o, &delta).ok()) std::abort();
    benchmark::DoNotOptimize(plain.data());
    benchmark::DoNotOptimize(delta.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["plain_bytes"] = static_cast<double>(plain.size());
  state.counters["delta_bytes"] = static_cast<double>(delta.size() + 2 * sizeof(ChunkHash));
}

int RegisterAll() {
  benchmark::RegisterBenchmark("BM_Xxh3_128/1MiB", BM_Xxh3_128);
  for (const DataSet& data : kDataSets) {
    benchmark::RegisterBenchmark(("BM_Shuffle/" + std::string(data.name)).c_str(), BM_Shuffle, data);
    for (const VariantInfo& v : kVariants) {
      if (Float16Only(v.variant) && data.element_size != 2) continue;
      const std::string suffix = std::string(data.name) + "/" + v.name;
      benchmark::RegisterBenchmark(("BM_Encode/" + suffix).c_str(), BM_Encode, data, v.variant)
          ->ArgName("level")->Arg(1)->Arg(3);
      benchmark::RegisterBenchmark(("BM_Decode/" + suffix).c_str(), BM_Decode, data, v.variant)
          ->ArgName("level")->Arg(1)->Arg(3);
    }
  }
  for (const DeltaSet& set : kDeltaSets) {
    const std::string name(set.name);
    benchmark::RegisterBenchmark(("BM_EncodeDelta/" + name).c_str(), BM_EncodeDelta, set)->ArgName("planes")->Arg(1)->Arg(0);
    benchmark::RegisterBenchmark(("BM_DecodeDelta/" + name).c_str(), BM_DecodeDelta, set)->ArgName("planes")->Arg(1)->Arg(0);
    benchmark::RegisterBenchmark(("BM_DecodeKeyframe/" + name).c_str(), BM_DecodeKeyframe, set)
        ->ArgName("planes")->Arg(1)->Arg(0);
    benchmark::RegisterBenchmark(("BM_RestoreDeltaChunk/" + name).c_str(), BM_RestoreDeltaChunk, set)
        ->ArgName("planes")->Arg(1)->Arg(0);
    benchmark::RegisterBenchmark(("BM_DeltaEstimate/" + name).c_str(), BM_DeltaEstimate, set);
    benchmark::RegisterBenchmark(("BM_SmallDelta/" + std::string(set.name)).c_str(), BM_SmallDelta, set)
        ->ArgName("bytes")->Arg(64)->Arg(128)->Arg(256)->Arg(1024)->Arg(2048)->Arg(4096)->Arg(16384)->Arg(65536);
  }
  return 0;
}
const int kRegistered = RegisterAll();

}  // namespace
}  // namespace trainsnap::internal

BENCHMARK_MAIN();
