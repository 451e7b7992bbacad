#include "capture/staging.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/training_rig.h"

namespace trainsnap::internal {
namespace {

using capture_test::BitwiseEqual;

TEST(StagingTest, CopyToHostIsContiguousAndSharesNoMemory) {
  torch::Tensor source = torch::arange(12, torch::kFloat32).reshape({3, 4}).t();  // non-contiguous
  torch::Tensor host = StagingArea::CopyToHost(source);
  EXPECT_TRUE(host.is_contiguous());
  EXPECT_TRUE(BitwiseEqual(host, source));
  torch::Tensor contiguous = torch::ones({5});
  torch::Tensor copy = StagingArea::CopyToHost(contiguous);
  EXPECT_NE(copy.data_ptr(), contiguous.data_ptr());
  contiguous.fill_(7);
  EXPECT_EQ(copy[0].item<float>(), 1.0f);
}

TEST(StagingTest, AllZeroBytesIsBitwise) {
  EXPECT_TRUE(StagingArea::IsAllZeroBytes(torch::zeros({5000})));
  EXPECT_TRUE(StagingArea::IsAllZeroBytes(torch::zeros({0})));
  torch::Tensor t = torch::zeros({5000});
  t[4999] = -0.0f;  // negative zero is not all-zero bytes
  EXPECT_FALSE(StagingArea::IsAllZeroBytes(t));
  torch::Tensor u = torch::zeros({1025}, torch::kFloat64);
  u[1024] = 1e-300;
  EXPECT_FALSE(StagingArea::IsAllZeroBytes(u));
}

TEST(StagingTest, AddStagesAViewAndRejectsDuplicates) {
  StagingArea staging;
  torch::Tensor t = torch::randn({2, 3}, torch::kFloat64);
  ASSERT_TRUE(staging.Add(7, "param", t).ok());
  ASSERT_TRUE(staging.Add(7, "grad", t).ok());
  Status dup = staging.Add(7, "param", t);
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  ASSERT_EQ(staging.tensors().size(), 2u);
  EXPECT_EQ(staging.bytes(), 2u * 6 * 8);
  TensorView view = ViewOf(staging.tensors()[0]);
  EXPECT_EQ(view.param_id, 7u);
  EXPECT_EQ(view.role, "param");
  EXPECT_EQ(view.dtype, DType::kFloat64);
  EXPECT_EQ(view.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(view.size_bytes, 48u);
  EXPECT_EQ(std::memcmp(view.data, t.data_ptr(), 48), 0);
}

TEST(StagingTest, UnsupportedDtypeIsNotSupported) {
  StagingArea staging;
  torch::Tensor q = torch::quantize_per_tensor(torch::ones({2}), 0.1, 0, torch::kQInt8);
  EXPECT_EQ(staging.Add(1, "param", q).code(), StatusCode::kNotSupported);
}

}  // namespace
}  // namespace trainsnap::internal
