#include "store/rocks_store.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <random>
#include <vector>

#include "temp_dir.h"
#include "trainsnap/store.h"

namespace trainsnap {
namespace {

using testing::TempDir;

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TensorView View(uint64_t param_id, std::string role, const std::vector<float>& data) {
  TensorView v;
  v.param_id = param_id;
  v.role = std::move(role);
  v.dtype = DType::kFloat32;
  v.shape = {static_cast<int64_t>(data.size())};
  v.data = data.data();
  v.size_bytes = data.size() * sizeof(float);
  return v;
}

StoreOptions SmallChunks() {
  StoreOptions o;
  o.chunk_bytes = 4096;  // several chunks per test tensor
  o.sync = false;
  o.threads = 2;
  return o;
}

Result<SnapshotInfo> WriteSnapshot(Store& store, int64_t step,
                                   const std::vector<std::pair<uint64_t, const std::vector<float>*>>& tensors,
                                   std::string manifest = "m", SnapshotOptions options = {}) {
  TRAINSNAP_ASSIGN_OR_RETURN(auto writer, store.BeginSnapshot(step, options));
  for (const auto& [id, data] : tensors) TRAINSNAP_RETURN_IF_ERROR(writer->AddTensor(View(id, "param", *data)));
  writer->SetManifest(std::move(manifest));
  return writer->Commit();
}

std::vector<float> ReadFloats(Store& store, int64_t step, uint64_t param_id, const std::string& role = "param") {
  auto record = store.Tensor(step, param_id, role);
  EXPECT_TRUE(record.ok()) << record.status().ToString();
  if (!record.ok()) return {};
  std::vector<float> out(record->bytes / sizeof(float));
  Status s = store.ReadTensor(*record, out.data(), record->bytes);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

TEST(RocksStoreTest, WriteThenReadBitExact) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_FALSE((*store)->read_only());
  EXPECT_EQ((*store)->chunk_bytes(), 4096u);
  auto a = RandomFloats(5000, 1);  // 20000 bytes: 4 full chunks + a 3616-byte tail
  auto b = RandomFloats(3, 2);
  auto info = WriteSnapshot(**store, 10, {{1, &a}, {2, &b}}, "manifest-10");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->step, 10);
  EXPECT_EQ(info->tensors, 2u);
  EXPECT_EQ(info->logical_bytes, 20012u);
  EXPECT_EQ(info->chunks, 6u);
  EXPECT_EQ(info->new_chunks, 6u);
  EXPECT_EQ(info->new_bytes, info->stored_bytes);
  EXPECT_EQ(info->manifest_bytes, 11u);

  EXPECT_EQ(ReadFloats(**store, 10, 1), a);
  EXPECT_EQ(ReadFloats(**store, 10, 2), b);
  auto manifest = (*store)->Manifest(10);
  ASSERT_TRUE(manifest.ok());
  EXPECT_EQ(*manifest, "manifest-10");

  auto tensors = (*store)->Tensors(10);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  ASSERT_EQ(tensors->size(), 2u);
  EXPECT_EQ((*tensors)[0].param_id, 1u);
  EXPECT_EQ((*tensors)[0].role, "param");
  EXPECT_EQ((*tensors)[0].dtype, DType::kFloat32);
  EXPECT_EQ((*tensors)[0].shape, std::vector<int64_t>{5000});
  EXPECT_EQ((*tensors)[0].chunks.size(), 5u);
  EXPECT_EQ((*tensors)[0].chunks[4].raw_bytes, 20000u - 4 * 4096u);
  EXPECT_EQ((*tensors)[1].param_id, 2u);

  auto stored = (*store)->Info(10);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->stored_bytes, info->stored_bytes);
  EXPECT_EQ(stored->created_unix_ms, info->created_unix_ms);
}

TEST(RocksStoreTest, ListLatestAndNegativeSteps) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(store.ok());
  auto latest = (*store)->Latest();
  ASSERT_TRUE(latest.ok());
  EXPECT_FALSE(latest->has_value());
  auto a = RandomFloats(10, 3);
  for (int64_t step : {5, -3, 100, 0, 7}) ASSERT_TRUE(WriteSnapshot(**store, step, {{1, &a}}).ok());
  auto list = (*store)->List();
  ASSERT_TRUE(list.ok());
  std::vector<int64_t> steps;
  for (const auto& i : *list) steps.push_back(i.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{-3, 0, 5, 7, 100}));
  latest = (*store)->Latest();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->value(), 100);
}

TEST(RocksStoreTest, DedupWritesNothingTheSecondTime) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(store.ok());
  auto a = RandomFloats(5000, 4);
  auto first = WriteSnapshot(**store, 1, {{1, &a}});
  ASSERT_TRUE(first.ok());
  auto second = WriteSnapshot(**store, 2, {{1, &a}});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->new_chunks, 0u);
  EXPECT_EQ(second->new_bytes, 0u);
  EXPECT_EQ(second->chunks, 5u);
  EXPECT_EQ(second->stored_bytes, first->stored_bytes);
  auto stats = (*store)->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->chunks, 5u);
  EXPECT_EQ(stats->chunk_stored_bytes, first->new_bytes);

  // One changed element rewrites exactly one chunk.
  auto b = a;
  b[4500] += 1.f;
  auto third = WriteSnapshot(**store, 3, {{1, &b}});
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->new_chunks, 1u);
  EXPECT_EQ(ReadFloats(**store, 3, 1), b);
  EXPECT_EQ(ReadFloats(**store, 2, 1), a);
}

TEST(RocksStoreTest, CommitExistingStepNeedsReplace) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(store.ok());
  auto a = RandomFloats(100, 5);
  auto b = RandomFloats(50, 6);
  ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &a}, {2, &a}}, "old").ok());
  auto again = WriteSnapshot(**store, 1, {{1, &b}});
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ReadFloats(**store, 1, 1), a);

  SnapshotOptions replace;
  replace.replace_existing = true;
  ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &b}}, "new", replace).ok());
  EXPECT_EQ(ReadFloats(**store, 1, 1), b);
  auto tensors = (*store)->Tensors(1);
  ASSERT_TRUE(tensors.ok());
  EXPECT_EQ(tensors->size(), 1u);  // param 2 of the old snapshot is gone
  EXPECT_EQ((*store)->Manifest(1).value(), "new");
}

TEST(RocksStoreTest, AddTensorValidates) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(store.ok());
  auto writer = (*store)->BeginSnapshot(1);
  ASSERT_TRUE(writer.ok());
  auto a = RandomFloats(4, 7);
  TensorView v = View(1, "param", a);
  v.size_bytes = 12;
  EXPECT_EQ((*writer)->AddTensor(v).code(), StatusCode::kInvalidArgument);
  v = View(1, "param", a);
  v.dtype = DType::kUnknown;
  EXPECT_EQ((*writer)->AddTensor(v).code(), StatusCode::kInvalidArgument);
  v = View(1, "param", a);
  v.shape = {-1, -4};
  EXPECT_EQ((*writer)->AddTensor(v).code(), StatusCode::kInvalidArgument);
  v = View(1, "", a);
  EXPECT_EQ((*writer)->AddTensor(v).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE((*writer)->AddTensor(View(1, "param", a)).ok());
  Status dup = (*writer)->AddTensor(View(1, "param", a));
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.message().find("added twice"), std::string::npos) << dup.message();
  ASSERT_TRUE((*writer)->AddTensor(View(1, "exp_avg", a)).ok());
  auto info = (*writer)->Commit();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->tensors, 2u);
  EXPECT_EQ((*writer)->Commit().status().code(), StatusCode::kInvalidArgument);
}

TEST(RocksStoreTest, EmptyTensorsAndManifest) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(store.ok());
  auto writer = (*store)->BeginSnapshot(1);
  ASSERT_TRUE(writer.ok());
  TensorView empty;
  empty.param_id = 9;
  empty.role = "grad";
  empty.dtype = DType::kBFloat16;
  empty.shape = {0, 7};
  ASSERT_TRUE((*writer)->AddTensor(empty).ok());
  TensorView scalar;
  int64_t value = -42;
  scalar.param_id = 9;
  scalar.role = "step";
  scalar.dtype = DType::kInt64;
  scalar.shape = {};
  scalar.data = &value;
  scalar.size_bytes = 8;
  ASSERT_TRUE((*writer)->AddTensor(scalar).ok());
  auto info = (*writer)->Commit();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->manifest_bytes, 0u);
  EXPECT_EQ(info->chunks, 1u);
  auto record = (*store)->Tensor(1, 9, "grad");
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->bytes, 0u);
  EXPECT_EQ(record->shape, (std::vector<int64_t>{0, 7}));
  EXPECT_TRUE(record->chunks.empty());
  EXPECT_TRUE((*store)->ReadTensor(*record, nullptr, 0).ok());
  auto s = (*store)->Tensor(1, 9, "step");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->shape.empty());
  int64_t back = 0;
  ASSERT_TRUE((*store)->ReadTensor(*s, &back, 8).ok());
  EXPECT_EQ(back, -42);
  EXPECT_EQ((*store)->ReadTensor(*s, &back, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->Manifest(1).value(), "");
}

TEST(RocksStoreTest, NotFoundErrors) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(store.ok());
  auto a = RandomFloats(10, 8);
  ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &a}}).ok());
  EXPECT_EQ((*store)->Info(2).status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*store)->Manifest(2).status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*store)->Tensors(2).status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*store)->Tensor(1, 2, "param").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*store)->Tensor(1, 1, "grad").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*store)->Delete(2).code(), StatusCode::kNotFound);
  StoreOptions no_create;
  no_create.create_if_missing = false;
  EXPECT_EQ(Store::Open(dir.Sub("missing"), no_create).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Store::OpenReadOnly(dir.Sub("missing")).status().code(), StatusCode::kNotFound);
}

TEST(RocksStoreTest, DeleteHidesSnapshotAndKeepsOthers) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(store.ok());
  auto a = RandomFloats(2000, 9);
  auto b = RandomFloats(2000, 10);
  ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &a}}).ok());
  ASSERT_TRUE(WriteSnapshot(**store, 2, {{1, &b}}).ok());
  ASSERT_TRUE((*store)->Delete(1).ok());
  EXPECT_EQ((*store)->Info(1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*store)->Tensor(1, 1, "param").status().code(), StatusCode::kNotFound);
  auto list = (*store)->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].step, 2);
  EXPECT_EQ(ReadFloats(**store, 2, 1), b);
}

TEST(RocksStoreTest, ConcurrentAddTensor) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(store.ok());
  std::vector<std::vector<float>> data;
  for (int i = 0; i < 8; ++i) data.push_back(RandomFloats(3000, 100 + i % 4));  // pairs share content
  auto writer = (*store)->BeginSnapshot(1);
  ASSERT_TRUE(writer.ok());
  std::vector<std::thread> threads;
  std::vector<Status> results(data.size());
  for (size_t i = 0; i < data.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = (*writer)->AddTensor(View(i, "param", data[i])); });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  auto info = (*writer)->Commit();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->chunks, 8u * 3u);
  EXPECT_EQ(info->new_chunks, 4u * 3u);  // 4 distinct contents of 3 chunks each
  for (size_t i = 0; i < data.size(); ++i) EXPECT_EQ(ReadFloats(**store, 1, i), data[i]);
}

}  // namespace
}  // namespace trainsnap
