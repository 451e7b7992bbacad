// Uses only the store API (bytes, dtypes, shapes) through pkg-config flags.
#include <cstdio>
#include <cstring>
#include <vector>

#include "trainsnap/store.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto store = trainsnap::Store::Open(argv[1]);
  if (!store.ok()) {
    std::fprintf(stderr, "open: %s\n", store.status().ToString().c_str());
    return 1;
  }
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  auto writer = (*store)->BeginSnapshot(5);
  if (!writer.ok()) return 1;
  trainsnap::TensorView view;
  view.param_id = 42;
  view.role = "param";
  view.dtype = trainsnap::DType::kFloat32;
  view.shape = {10, 100};
  view.data = values.data();
  view.size_bytes = values.size() * sizeof(float);
  if (!(*writer)->AddTensor(view).ok()) return 1;
  auto info = (*writer)->Commit();
  if (!info.ok()) {
    std::fprintf(stderr, "commit: %s\n", info.status().ToString().c_str());
    return 1;
  }
  auto record = (*store)->Tensor(5, 42, "param");
  if (!record.ok()) return 1;
  std::vector<float> back(values.size());
  if (!(*store)->ReadTensor(*record, back.data(), back.size() * sizeof(float)).ok()) return 1;
  bool same = std::memcmp(back.data(), values.data(), view.size_bytes) == 0;
  std::printf("pkg-config consumer: round trip bitwise: %s\n", same ? "yes" : "no");
  return same ? 0 : 1;
}
