#include "capture/staging.h"

#include <cstdint>
#include <cstring>

#include <boost/asio/thread_pool.hpp>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "capture/staging_pool.h"
#include "capture/staging_scope.h"
#include "testing/training_rig.h"

namespace trainsnap::internal {
namespace {

using capture_test::BitwiseEqual;

TEST(StagingTest, CopyToHostIsContiguousAndSharesNoMemory) {
  StagingArea staging;
  torch::Tensor source = torch::arange(12, torch::kFloat32).reshape({3, 4}).t();  // non-contiguous
  torch::Tensor host = staging.CopyToHost(source);
  EXPECT_TRUE(host.is_contiguous());
  EXPECT_TRUE(BitwiseEqual(host, source));
  torch::Tensor contiguous = torch::ones({5});
  torch::Tensor copy = staging.CopyToHost(contiguous);
  EXPECT_NE(copy.data_ptr(), contiguous.data_ptr());
  contiguous.fill_(7);
  EXPECT_EQ(copy[0].item<float>(), 1.0f);
}

TEST(StagingTest, AllZeroBytesIsBitwise) {
  StagingArea staging;
  EXPECT_TRUE(staging.IsAllZeroBytes(torch::zeros({5000})));
  EXPECT_TRUE(staging.IsAllZeroBytes(torch::zeros({0})));
  torch::Tensor t = torch::zeros({5000});
  t[4999] = -0.0f;  // negative zero is not all-zero bytes
  EXPECT_FALSE(staging.IsAllZeroBytes(t));
  torch::Tensor u = torch::zeros({1025}, torch::kFloat64);
  u[1024] = 1e-300;
  EXPECT_FALSE(staging.IsAllZeroBytes(u));
}

TEST(StagingTest, WithAScopeStagesIntoThePoolsBuffers) {
  auto pool = StagingPool::Create(0);
  StagingScope scope(pool, nullptr);
  StagingArea staging(&scope);
  // 64 KiB: its own size class, so the pool charges exactly the staged bytes.
  torch::Tensor t = torch::randn({16384});
  torch::Tensor want = t.clone();
  ASSERT_EQ(StagingPool::SizeClass(t.nbytes()), 65536u);
  ASSERT_TRUE(staging.Add(3, "param", t).ok());
  t.fill_(-1);  // the staged copy shares no memory with the live tensor
  EXPECT_EQ(staging.bytes(), 65536u);
  EXPECT_EQ(pool->stats().in_use_bytes, 65536u);
  EXPECT_EQ(pool->stats().allocations, 1u);
  EXPECT_TRUE(scope.Finish().empty());  // CPU only: no device event
  EXPECT_TRUE(BitwiseEqual(staging.tensors()[0].host, want));
  staging = StagingArea();  // the staged copy goes back to the pool
  EXPECT_EQ(pool->stats().in_use_bytes, 0u);
  EXPECT_EQ(pool->stats().cached_bytes, 65536u);
}

// Past the first StagingSlabs::kUnslabbed small tensors of a capture, a
// small contiguous CPU tensor is copied into a slab the staging area holds,
// without a tensor of its own; its view has the right bytes and shape, also
// after the scope is gone and the live tensors changed. Others keep `host`.
TEST(StagingTest, SmallTensorsPastTheFirstBecomeSlabPiecesWithTheirBytesAndShape) {
  auto pool = StagingPool::Create(0);
  StagingArea staging;
  std::vector<torch::Tensor> live, want;
  {
    StagingScope scope(pool, nullptr);
    staging = StagingArea(&scope);
    const int64_t n = static_cast<int64_t>(StagingSlabs::kUnslabbed) + 2000;  // several slabs of pieces
    for (int64_t i = 0; i < n; ++i) {
      torch::Tensor t = i % 3 == 0 ? torch::randn({4, 5}, torch::kFloat64)  // 160 bytes
                                   : torch::randint(0, 100, {7}, torch::kInt32);  // 28 bytes: padded
      live.push_back(t);
      want.push_back(t.clone());
      ASSERT_TRUE(staging.Add(static_cast<uint64_t>(i), "param", t).ok());
    }
    // Not pieces: a strided tensor and a large one.
    torch::Tensor strided = torch::arange(12, torch::kFloat32).reshape({3, 4}).t();
    ASSERT_TRUE(staging.Add(n, "param", strided).ok());
    ASSERT_TRUE(staging.Add(n + 1, "param", torch::ones({2048})).ok());  // 8 KiB
    live.push_back(strided);
    want.push_back(strided.contiguous());
    want.push_back(torch::ones({2048}));
    EXPECT_TRUE(scope.Finish().empty());
  }
  for (torch::Tensor& t : live) t.fill_(-1);  // the staged copies share no memory with them
  const std::vector<StagedTensor>& staged = staging.tensors();
  ASSERT_EQ(staged.size(), want.size());
  uint64_t bytes = 0;
  for (size_t i = 0; i < staged.size(); ++i) {
    const bool piece = i >= StagingSlabs::kUnslabbed && i + 2 < staged.size();
    EXPECT_EQ(staged[i].piece != nullptr, piece) << i;
    EXPECT_EQ(staged[i].host.defined(), !piece) << i;
    TensorView view = ViewOf(staged[i]);
    EXPECT_EQ(view.shape, std::vector<int64_t>(want[i].sizes().begin(), want[i].sizes().end())) << i;
    ASSERT_EQ(view.size_bytes, want[i].nbytes()) << i;
    EXPECT_EQ(std::memcmp(view.data, want[i].data_ptr(), view.size_bytes), 0) << i;
    if (piece) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(view.data) % kSlabAlignment, 0u) << i;
    }
    bytes += want[i].nbytes();
  }
  EXPECT_EQ(staging.bytes(), bytes);
  EXPECT_GT(pool->stats().in_use_bytes, 0u);
  staging = StagingArea();  // the slabs go back to the pool with the area
  EXPECT_EQ(pool->stats().in_use_bytes, 0u);
}

TEST(StagingTest, WithoutAScopeMakesAPlainCopy) {
  auto pool = StagingPool::Create(0);
  StagingScope scope(pool, nullptr);  // exists, but the area was not given it
  StagingArea staging;
  torch::Tensor t = torch::arange(16384, torch::kFloat32);
  ASSERT_TRUE(staging.Add(3, "param", t).ok());
  t.fill_(-1);
  EXPECT_EQ(staging.bytes(), 65536u);
  EXPECT_EQ(pool->stats().in_use_bytes, 0u);
  EXPECT_EQ(pool->stats().allocations, 0u);
  EXPECT_TRUE(BitwiseEqual(staging.tensors()[0].host, torch::arange(16384, torch::kFloat32)));
}

TEST(StagingTest, AllZeroBytesWaitsForTheScopesDeferredCopies) {
  auto pool = StagingPool::Create(0);
  boost::asio::thread_pool copy_pool(2);
  StagingScope scope(pool, &copy_pool);
  StagingArea staging(&scope);
  // Large and contiguous: the scope defers its copy to the copy pool.
  const int64_t n = StagingScope::kParallelCopyBytes / 4 + 1;
  torch::Tensor ones = torch::ones({n});
  torch::Tensor ones_host = staging.CopyToHost(ones);
  EXPECT_FALSE(staging.IsAllZeroBytes(ones_host));  // read after the copy ran, not a fresh buffer
  EXPECT_TRUE(BitwiseEqual(ones_host, torch::ones({n})));
  torch::Tensor last = torch::zeros({n});
  last[n - 1] = 1.0f;
  EXPECT_FALSE(staging.IsAllZeroBytes(staging.CopyToHost(last)));
  EXPECT_TRUE(staging.IsAllZeroBytes(staging.CopyToHost(torch::zeros({n}))));
  EXPECT_TRUE(scope.Finish().empty());
  copy_pool.join();
}

// A conjugate or negative view is a lazy bit over unchanged bytes: the copy
// must resolve it, also for tensors large enough to be copied in ranges on
// the copy pool (a raw memcpy there staged the unconjugated values).
TEST(StagingTest, LargeConjugateAndNegativeViewsAreStagedResolved) {
  auto pool = StagingPool::Create(0);
  boost::asio::thread_pool copy_pool(2);
  StagingScope scope(pool, &copy_pool);
  StagingArea staging(&scope);
  const int64_t n = StagingScope::kParallelCopyBytes / 8 + 1;  // complex64: 8 bytes each
  torch::Tensor z = torch::complex(torch::arange(n, torch::kFloat), torch::ones({n}));
  torch::Tensor conj = z.conj();
  ASSERT_TRUE(conj.is_conj());
  ASSERT_TRUE(conj.is_contiguous());
  torch::Tensor neg = torch::_neg_view(torch::arange(2 * n, torch::kFloat));
  ASSERT_TRUE(neg.is_neg());
  torch::Tensor conj_host = staging.CopyToHost(conj);
  torch::Tensor neg_host = staging.CopyToHost(neg);
  EXPECT_TRUE(scope.Finish().empty());
  EXPECT_FALSE(conj_host.is_conj());
  EXPECT_FALSE(neg_host.is_neg());
  EXPECT_TRUE(BitwiseEqual(conj_host, z.conj().resolve_conj()));
  EXPECT_EQ(torch::imag(conj_host)[n - 1].item<float>(), -1.0f);
  EXPECT_TRUE(BitwiseEqual(neg_host, -torch::arange(2 * n, torch::kFloat)));
  copy_pool.join();
}

// A pair staged twice is the writer's to refuse (EncodeTest.
// APairStagedTwiceIsRefusedWhenEncodedAndNothingIsCommitted).
TEST(StagingTest, AddStagesAView) {
  StagingArea staging;
  torch::Tensor t = torch::randn({2, 3}, torch::kFloat64);
  ASSERT_TRUE(staging.Add(7, "param", t).ok());
  ASSERT_TRUE(staging.Add(7, "grad", t).ok());
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
