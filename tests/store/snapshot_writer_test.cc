#include "store/snapshot_writer.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "store_test_util.h"
#include "temp_dir.h"
#include "trainsnap/store.h"

namespace trainsnap {
namespace {

using namespace trainsnap::testing;

TEST(SnapshotWriterTest, AddTensorValidates) {
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

TEST(SnapshotWriterTest, EmptyTensorsAndManifest) {
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

TEST(SnapshotWriterTest, ConcurrentAddTensor) {
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
