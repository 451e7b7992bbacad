#include "cli/tensor_decode.h"

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "testing/status_matchers.h"
#include "testing/store_fixtures.h"

namespace trainsnap::cli {
namespace {

TEST(TensorDecodeTest, ElementCounts) {
  EXPECT_EQ(*ElementCount({}), 1u);  // a scalar
  EXPECT_EQ(*ElementCount({2, 3, 4}), 24u);
  EXPECT_EQ(*ElementCount({5, 0, 7}), 0u);
  EXPECT_EQ(*ElementCount({int64_t{1} << 32, int64_t{1} << 31}), uint64_t{1} << 63);
  const auto negative = ElementCount({4, -3});
  EXPECT_EQ(negative.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(negative.status().message(), "shape has a negative dimension -3");
  const auto overflow = ElementCount({int64_t{1} << 32, int64_t{1} << 32});
  EXPECT_EQ(overflow.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(overflow.status().message(), "shape's element count overflows");
  // A zero anywhere makes the count 0, overflow or not after it.
  EXPECT_EQ(*ElementCount({0, int64_t{1} << 62, int64_t{1} << 62}), 0u);
}

TEST(TensorDecodeTest, ContiguousBytes) {
  EXPECT_EQ(*ContiguousBytes(DType::kFloat32, {2, 3}), 24u);
  EXPECT_EQ(*ContiguousBytes(DType::kBFloat16, {5}), 10u);
  EXPECT_EQ(*ContiguousBytes(DType::kComplex128, {2}), 32u);
  EXPECT_EQ(*ContiguousBytes(DType::kBool, {}), 1u);
  const auto unknown = ContiguousBytes(DType::kUnknown, {1});
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(unknown.status().message(), "dtype code 0 is not a known dtype");
  EXPECT_STATUS(ContiguousBytes(static_cast<DType>(99), {1}), StatusCode::kNotSupported,
                "dtype code 99 is not a known dtype");
  const auto overflow = ContiguousBytes(DType::kFloat64, {int64_t{1} << 61});
  EXPECT_EQ(overflow.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(overflow.status().message(), "shape's byte count overflows");
  EXPECT_EQ(*ContiguousBytes(DType::kFloat64, {int64_t{1} << 60}), uint64_t{1} << 63);
  EXPECT_STATUS(ContiguousBytes(DType::kInt8, {-1}), StatusCode::kCorruption, "shape has a negative dimension -1");
}

TEST(TensorDecodeTest, ReadsAStoredTensorsBytes) {
  testing::TempStore store;
  const std::vector<uint8_t> bytes = testing::RandomBytes(DType::kFloat32, 3000, 11);
  testing::TensorSpec spec;
  spec.param_id = 4;
  spec.shape = {30, 100};
  spec.data = bytes;
  ASSERT_OK(testing::WriteSnapshot(*store.store, 9, {spec}));
  auto records = store.store->Tensors(9);
  ASSERT_OK(records);
  ASSERT_EQ(records->size(), 1u);
  auto read = ReadTensorBytes(*store.store, (*records)[0]);
  ASSERT_OK(read);
  EXPECT_EQ(*read, bytes);

  TensorRecord lying = (*records)[0];
  lying.bytes = 12004;
  const auto mismatch = ReadTensorBytes(*store.store, lying);
  EXPECT_EQ(mismatch.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(mismatch.status().message(), "record says 12004 bytes, shape and dtype give 12000");
  TensorRecord unknown = (*records)[0];
  unknown.dtype = DType::kUnknown;
  EXPECT_STATUS(ReadTensorBytes(*store.store, unknown), StatusCode::kNotSupported, "dtype code 0 is not a known dtype");
}

}  // namespace
}  // namespace trainsnap::cli
