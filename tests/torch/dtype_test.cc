// The one mapping between LibTorch's ScalarType and the store's DType codes.
#include "torch/dtype.h"

#include <gtest/gtest.h>

namespace trainsnap::internal {
namespace {

TEST(TorchDTypeTest, EveryStoreCodeRoundTripsThroughItsScalarTypeWithTheSameElementSize) {
  for (uint32_t code = 1; IsValidDType(code); ++code) {
    const DType dtype = static_cast<DType>(code);
    Result<c10::ScalarType> type = ToScalarType(dtype);
    ASSERT_TRUE(type.ok()) << code << ": " << type.status().ToString();
    EXPECT_EQ(c10::elementSize(*type), DTypeSize(dtype)) << DTypeName(dtype);
    Result<DType> back = ToDType(*type);
    ASSERT_TRUE(back.ok()) << code;
    EXPECT_EQ(*back, dtype) << DTypeName(dtype);
  }
  EXPECT_EQ(*ToDType(c10::kFloat), DType::kFloat32);
  EXPECT_EQ(*ToDType(c10::kBFloat16), DType::kBFloat16);
  EXPECT_EQ(*ToScalarType(DType::kComplex128), c10::kComplexDouble);
}

TEST(TorchDTypeTest, TypesWithoutACodeAreNotSupported) {
  Result<DType> quantized = ToDType(c10::kQInt8);
  EXPECT_EQ(quantized.status(), Status::NotSupported("tensor dtype QInt8 cannot be stored"));
  Result<c10::ScalarType> unknown = ToScalarType(DType::kUnknown);
  EXPECT_EQ(unknown.status(), Status::NotSupported("dtype code 0 has no LibTorch type"));
  Result<c10::ScalarType> future = ToScalarType(static_cast<DType>(99));
  EXPECT_EQ(future.status(), Status::NotSupported("dtype code 99 has no LibTorch type"));
}

}  // namespace
}  // namespace trainsnap::internal
