// Store fixtures of the test suites: the tests' store options
// (store_options.h), a store in a temporary directory (TempStore, and the
// StoreTest fixture of store_test.h), and snapshots written straight through
// the Store API from plain byte buffers (no LibTorch).
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "testing/store_options.h"
#include "testing/store_test.h"
#include "testing/temp_dir.h"
#include "trainsnap/store.h"

namespace trainsnap::testing {

// A store in its own temporary directory, open (default chunking, no sync,
// 2 threads) until Close() or destruction.
class TempStore {
 public:
  TempStore() { Open(); }
  ~TempStore() { store.reset(); }
  void Open(RetentionPolicy retention = {}) {
    StoreOptions options;
    options.sync = false;
    options.threads = 2;
    options.retention = retention;
    auto opened = Store::Open(path_.string(), options);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    store = std::move(opened).value();
  }
  void Close() { store.reset(); }
  const std::filesystem::path& path() const { return path_; }
  std::unique_ptr<Store> store;

 private:
  TempDir dir_;
  std::filesystem::path path_ = dir_.Sub("store");
};

// A tensor to write through the Store API.
struct TensorSpec {
  uint64_t param_id = 0;
  std::string role = "param";
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

inline std::vector<uint8_t> FloatBytes(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

inline std::vector<float> RandomFloats(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

inline std::vector<uint8_t> RandomBytes(DType dtype, size_t elements, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(elements * DTypeSize(dtype));
  if (dtype == DType::kBool) {
    for (auto& b : bytes) b = static_cast<uint8_t>(rng() & 1);
  } else if (dtype == DType::kFloat32) {
    auto floats = RandomFloats(elements, seed);
    if (!bytes.empty()) std::memcpy(bytes.data(), floats.data(), bytes.size());  // data() may be null when empty
  } else if (dtype == DType::kFloat64) {
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    for (size_t i = 0; i < elements; ++i) {
      double v = dist(rng);
      std::memcpy(bytes.data() + i * 8, &v, 8);
    }
  } else if (dtype == DType::kFloat16 || dtype == DType::kBFloat16) {
    // Finite values only: exponent field never all-ones.
    for (size_t i = 0; i < elements; ++i) {
      uint16_t v = static_cast<uint16_t>(rng());
      if (dtype == DType::kFloat16) v &= 0xBBFF; else v &= 0xBF7F;
      std::memcpy(bytes.data() + i * 2, &v, 2);
    }
  } else {
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  }
  return bytes;
}

// AddTensor for each of `tensors`, in order; the first error.
inline Status AddTensors(SnapshotWriter& writer, const std::vector<TensorSpec>& tensors) {
  for (const TensorSpec& t : tensors) {
    TensorView view;
    view.param_id = t.param_id;
    view.role = t.role;
    view.dtype = t.dtype;
    view.shape = t.shape;
    view.data = t.data.data();
    view.size_bytes = t.data.size();
    TRAINSNAP_RETURN_IF_ERROR(writer.AddTensor(view));
  }
  return Status::OK();
}

// The kit's snapshot writer: BeginSnapshot, AddTensors, SetManifest, Commit.
inline Result<SnapshotInfo> WriteSnapshot(Store& store, int64_t step, const std::vector<TensorSpec>& tensors,
                                          const std::string& manifest = {}, const SnapshotOptions& options = {}) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<SnapshotWriter> writer, store.BeginSnapshot(step, options));
  TRAINSNAP_RETURN_IF_ERROR(AddTensors(*writer, tensors));
  writer->SetManifest(manifest);
  return writer->Commit();
}

// As WriteSnapshot, but the writer is destroyed uncommitted (an abandoned
// capture): OK when every tensor was added.
inline Status WriteUncommitted(Store& store, int64_t step, const std::vector<TensorSpec>& tensors,
                               const std::string& manifest = {}) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<SnapshotWriter> writer, store.BeginSnapshot(step));
  TRAINSNAP_RETURN_IF_ERROR(AddTensors(*writer, tensors));
  writer->SetManifest(manifest);
  return Status::OK();
}

}  // namespace trainsnap::testing
