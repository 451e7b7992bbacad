// Chunk codec micro-benchmarks (Google Benchmark), single-threaded, so every
// rate is per core: XXH3-128 hashing, and encode/decode of one default-size
// (1 MiB) chunk of normally distributed fp32 and bf16 values, through the
// store's codec with and without the byte-plane shuffle, against plain Zstd at
// the same level. The `ratio` counter is raw bytes / stored bytes.
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

struct DataSet {
  const char* name;
  size_t element_size;
  std::vector<uint8_t> (*make)();
};
const DataSet kDataSets[] = {
    {"fp32_normal", 4, &Fp32Data},
    {"bf16_normal", 2, &Bf16Data},
};

enum class Variant { kShuffle, kNoShuffle, kPlainZstd };
struct VariantInfo {
  const char* name;
  Variant variant;
};
const VariantInfo kVariants[] = {
    {"codec_shuffle", Variant::kShuffle},
    {"codec_noshuffle", Variant::kNoShuffle},
    {"plain_zstd", Variant::kPlainZstd},
};

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
  o.shuffle = variant == Variant::kShuffle;
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

int RegisterAll() {
  benchmark::RegisterBenchmark("BM_Xxh3_128/1MiB", BM_Xxh3_128);
  for (const DataSet& data : kDataSets) {
    benchmark::RegisterBenchmark(("BM_Shuffle/" + std::string(data.name)).c_str(), BM_Shuffle, data);
    for (const VariantInfo& v : kVariants) {
      const std::string suffix = std::string(data.name) + "/" + v.name;
      benchmark::RegisterBenchmark(("BM_Encode/" + suffix).c_str(), BM_Encode, data, v.variant)
          ->ArgName("level")->Arg(1)->Arg(3);
      benchmark::RegisterBenchmark(("BM_Decode/" + suffix).c_str(), BM_Decode, data, v.variant)
          ->ArgName("level")->Arg(1)->Arg(3);
    }
  }
  return 0;
}
const int kRegistered = RegisterAll();

}  // namespace
}  // namespace trainsnap::internal

BENCHMARK_MAIN();
