// Helpers shared by the store tests: random tensors, one-call snapshot writes.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "testing/store_options.h"
#include "trainsnap/store.h"

namespace trainsnap::testing {

// n values drawn from N(0, 1): the store tests' data (testing::RandomFloats
// in store_fixtures.h draws from U(-1, 1)).
inline std::vector<float> NormalFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline TensorView View(uint64_t param_id, std::string role, const std::vector<float>& data) {
  TensorView v;
  v.param_id = param_id;
  v.role = std::move(role);
  v.dtype = DType::kFloat32;
  v.shape = {static_cast<int64_t>(data.size())};
  v.data = data.data();
  v.size_bytes = data.size() * sizeof(float);
  return v;
}

// The kit's TestStoreOptions (4 KiB chunks: several per test tensor), no
// sync, with the default free-space reserve.
inline StoreOptions SmallChunks() {
  StoreOptions o = TestStoreOptions(/*sync=*/false);
  o.reserve_bytes = StoreOptions().reserve_bytes;
  return o;
}

// Delta chains (keyframe_interval, reference) over 4096-float chunks.
inline StoreOptions DeltaOptions(int keyframe_interval, DeltaReference reference = DeltaReference::kParent) {
  StoreOptions o;
  o.chunk_bytes = 16384;  // 4096 floats per chunk
  o.sync = false;
  o.threads = 2;
  o.keyframe_interval = keyframe_interval;
  o.delta_reference = reference;
  return o;
}

// Weights after `steps` small multiplicative updates (like a low learning
// rate): close enough to `w` for a delta to pay.
inline std::vector<float> Evolve(std::vector<float> w, int steps, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (int s = 0; s < steps; ++s) {
    for (float& x : w) x *= 1.f + 1e-4f * dist(rng);
  }
  return w;
}

inline Result<SnapshotInfo> WriteSnapshot(Store& store, int64_t step,
                                   const std::vector<std::pair<uint64_t, const std::vector<float>*>>& tensors,
                                   std::string manifest = "m", SnapshotOptions options = {}) {
  TRAINSNAP_ASSIGN_OR_RETURN(auto writer, store.BeginSnapshot(step, options));
  for (const auto& [id, data] : tensors) TRAINSNAP_RETURN_IF_ERROR(writer->AddTensor(View(id, "param", *data)));
  writer->SetManifest(std::move(manifest));
  return writer->Commit();
}

inline std::vector<float> ReadFloats(Store& store, int64_t step, uint64_t param_id, const std::string& role = "param") {
  auto record = store.Tensor(step, param_id, role);
  EXPECT_TRUE(record.ok()) << record.status().ToString();
  if (!record.ok()) return {};
  std::vector<float> out(record->bytes / sizeof(float));
  Status s = store.ReadTensor(*record, out.data(), record->bytes);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

}  // namespace trainsnap::testing
