// The content of tests/store/compat/format6-store.tar.gz: a store of format
// version 6 (chunks coded by chunk codec 1 only) written by main 4c3ace0.
// The tests regenerate the same tensors from these functions and compare the
// restored bytes bitwise, so the archive needs no expected-values file.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "trainsnap/store.h"

namespace trainsnap::testing::format6 {

// Written with these options: 16 KiB chunks, a keyframe every 4 snapshots,
// deltas against the parent, default compression (Zstd level 1).
inline StoreOptions WrittenWith() {
  StoreOptions o;
  o.chunk_bytes = 16384;
  o.sync = false;
  o.threads = 2;
  o.keyframe_interval = 4;
  o.delta_reference = DeltaReference::kParent;
  return o;
}

inline constexpr int64_t kSteps = 4;  // snapshots 0..3: a keyframe and three deltas

struct FixtureTensor {
  uint64_t param_id;
  DType dtype;
  std::vector<uint8_t> bytes;
};

// The tensors of snapshot `step`: fp32 weights (2 chunks and a partial one),
// bf16 weights, int64 counters, uint8 bytes and an fp32 tensor whose length
// is not a multiple of 4 elements, each evolving a little per step so that
// later snapshots hold XOR deltas.
inline std::vector<FixtureTensor> Tensors(int64_t step) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> w(9000), odd(1001);
  for (float& x : w) x = normal(rng);
  for (float& x : odd) x = normal(rng) * 1e-3f;
  for (int64_t s = 0; s < step; ++s) {
    for (float& x : w) x *= 1.f + 1e-4f * normal(rng);
    for (float& x : odd) x += 1e-6f * normal(rng);
  }
  std::vector<FixtureTensor> out;
  auto add = [&](uint64_t id, DType dtype, const void* data, size_t bytes) {
    FixtureTensor t{id, dtype, std::vector<uint8_t>(bytes)};
    std::memcpy(t.bytes.data(), data, bytes);
    out.push_back(std::move(t));
  };
  add(1, DType::kFloat32, w.data(), w.size() * 4);
  std::vector<uint16_t> bf(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &w[i], 4);
    bf[i] = static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
  }
  add(2, DType::kBFloat16, bf.data(), bf.size() * 2);
  std::vector<int64_t> counters(2048);
  for (size_t i = 0; i < counters.size(); ++i) counters[i] = static_cast<int64_t>(i * 3 + step);
  add(3, DType::kInt64, counters.data(), counters.size() * 8);
  std::vector<uint8_t> tokens(5000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint8_t>((i * 7 + step) % 251);
  add(4, DType::kUInt8, tokens.data(), tokens.size());
  add(5, DType::kFloat32, odd.data(), odd.size() * 4);
  return out;
}

inline TensorView ViewOf(const FixtureTensor& t) {
  TensorView v;
  v.param_id = t.param_id;
  v.role = "param";
  v.dtype = t.dtype;
  v.shape = {static_cast<int64_t>(t.bytes.size() / DTypeSize(t.dtype))};
  v.data = t.bytes.data();
  v.size_bytes = t.bytes.size();
  return v;
}

}  // namespace trainsnap::testing::format6
