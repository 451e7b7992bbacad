#include "trainsnap/status.h"

#include <gtest/gtest.h>

#include "trainsnap/dtype.h"

namespace trainsnap {
namespace {

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, ContextIsPrepended) {
  Status s = Status::Corruption("hash mismatch").WithContext("chunk 9f3a").WithContext("restore step 12");
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "restore step 12: chunk 9f3a: hash mismatch");
  EXPECT_EQ(s.ToString(), "Corruption: restore step 12: chunk 9f3a: hash mismatch");
  EXPECT_TRUE(Status::OK().WithContext("x").ok());
}

Result<int> Half(int v) {
  if (v % 2) return Status::InvalidArgument("odd");
  return v / 2;
}

Status Quarter(int v, int* out) {
  TRAINSNAP_ASSIGN_OR_RETURN(int h, Half(v));
  TRAINSNAP_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::OK();
}

TEST(ResultTest, ValueAndError) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = Quarter(6, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd");
  Result<int> r = Half(3);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.value_or(-1), -1);
  Result<int> bad{Status::OK()};
  EXPECT_EQ(bad.status().code(), StatusCode::kAborted);
}

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kComplex128), 16u);
  EXPECT_EQ(DTypeSize(DType::kUnknown), 0u);
  EXPECT_EQ(DTypeName(DType::kFloat32), "float32");
  EXPECT_FALSE(IsValidDType(0));
  EXPECT_TRUE(IsValidDType(12));
  EXPECT_FALSE(IsValidDType(13));
}

}  // namespace
}  // namespace trainsnap
