// StagingPool: size classes, reuse between captures, the byte bound with
// back-pressure across owners, and a single owner larger than the bound.
#include "capture/staging_pool.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace trainsnap::internal {
namespace {

TEST(StagingPoolTest, SizeClassesRoundUpByAtMostAnEighth) {
  EXPECT_EQ(StagingPool::SizeClass(1), 4096u);
  EXPECT_EQ(StagingPool::SizeClass(4096), 4096u);
  EXPECT_EQ(StagingPool::SizeClass(4097), 4608u);      // 4096 + 512
  EXPECT_EQ(StagingPool::SizeClass(8192), 8192u);
  EXPECT_EQ(StagingPool::SizeClass(1000000), 1048576u);  // steps of 65536 above 524288
  EXPECT_EQ(StagingPool::SizeClass(917504), 917504u);
}

TEST(StagingPoolTest, BuffersAreReusedAndAccountedExactly) {
  auto pool = StagingPool::Create(1 << 20);
  auto owner = std::make_shared<StagingOwner>();
  {
    torch::Tensor a = pool->Acquire({1000}, torch::kFloat32, /*pinned=*/false, owner);
    EXPECT_EQ(a.sizes(), torch::IntArrayRef({1000}));
    EXPECT_EQ(a.scalar_type(), torch::kFloat32);
    EXPECT_TRUE(a.is_contiguous());
    a.fill_(1.5);
    StagingPoolStats s = pool->stats();
    EXPECT_EQ(s.in_use_bytes, 4096u);
    EXPECT_EQ(owner->held, 4096u);
    EXPECT_EQ(s.allocations, 1u);
  }
  StagingPoolStats s = pool->stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.cached_bytes, 4096u);
  EXPECT_EQ(owner->held, 0u);
  // Same size class (4001..4096 bytes), other dtype and shape: the same memory.
  torch::Tensor b = pool->Acquire({2, 1000}, torch::kInt16, false, owner);
  s = pool->stats();
  EXPECT_EQ(s.allocations, 1u);
  EXPECT_EQ(s.reuses, 1u);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.in_use_bytes, 4096u);
  EXPECT_EQ(s.peak_in_use_bytes, 4096u);
  // Empty tensors cost nothing.
  torch::Tensor empty = pool->Acquire({0, 3}, torch::kFloat64, false, owner);
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(pool->stats().in_use_bytes, 4096u);
}

TEST(StagingPoolTest, SecondOwnerWaitsUntilTheFirstReleases) {
  auto pool = StagingPool::Create(3 * 4096);
  auto first = std::make_shared<StagingOwner>();
  auto second = std::make_shared<StagingOwner>();
  torch::Tensor a = pool->Acquire({2 * 4096}, torch::kUInt8, false, first);
  std::atomic<bool> acquired{false};
  std::thread other([&] {
    torch::Tensor b = pool->Acquire({2 * 4096}, torch::kUInt8, false, second);
    acquired = true;
    EXPECT_LE(pool->stats().in_use_bytes, 3u * 4096);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(acquired.load());  // 2 + 2 pages > 3: back-pressure
  // The first owner may still grow within the bound.
  torch::Tensor c = pool->Acquire({4096}, torch::kUInt8, false, first);
  EXPECT_EQ(pool->stats().in_use_bytes, 3u * 4096);
  a = torch::Tensor();
  c = torch::Tensor();
  other.join();
  EXPECT_TRUE(acquired.load());
  StagingPoolStats s = pool->stats();
  EXPECT_EQ(s.waits, 1u);
  EXPECT_EQ(s.peak_in_use_bytes, 3u * 4096);
  EXPECT_LE(s.in_use_bytes + s.cached_bytes, 3u * 4096);
}

TEST(StagingPoolTest, OwnerAloneMayExceedTheBound) {
  auto pool = StagingPool::Create(4096);
  auto owner = std::make_shared<StagingOwner>();
  torch::Tensor a = pool->Acquire({4096}, torch::kUInt8, false, owner);
  torch::Tensor b = pool->Acquire({3 * 4096}, torch::kUInt8, false, owner);  // does not wait: nobody else holds memory
  StagingPoolStats s = pool->stats();
  EXPECT_EQ(s.in_use_bytes, 4u * 4096);
  EXPECT_EQ(s.waits, 0u);
  a = torch::Tensor();
  b = torch::Tensor();
  s = pool->stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_LE(s.cached_bytes, 4096u);  // only what fits in the bound is kept
}

}  // namespace
}  // namespace trainsnap::internal
