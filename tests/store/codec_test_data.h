// Chunk data of the codec tests (chunk_codec_test, byte_planes_test,
// plane_entropy_test): random bytes, and float training state as bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace trainsnap::internal::codec_test {

// n uniformly random bytes.
inline std::vector<uint8_t> Noise(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

// n fp32 weights of a typical scale, 0.02 x N(0, 1), as bytes.
inline std::vector<uint8_t> NormalFp32Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 0.02f);
  std::vector<uint8_t> out(n * 4);
  for (size_t i = 0; i < n; ++i) {
    const float f = dist(rng);
    std::memcpy(out.data() + 4 * i, &f, 4);
  }
  return out;
}

// The bf16 bits of an fp32 value, rounded to nearest even (as LibTorch does).
inline uint16_t Bf16Bits(const uint8_t* fp32) {
  uint32_t bits;
  std::memcpy(&bits, fp32, 4);
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

// The same values as bf16.
inline std::vector<uint8_t> NormalBf16Bytes(size_t n, uint32_t seed) {
  const auto fp32 = NormalFp32Bytes(n, seed);
  std::vector<uint8_t> out(n * 2);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t bf = Bf16Bits(fp32.data() + 4 * i);
    std::memcpy(out.data() + 2 * i, &bf, 2);
  }
  return out;
}

}  // namespace trainsnap::internal::codec_test
