// StagingPool: size classes, reuse between captures, the byte bound with
// back-pressure across owners, and a single owner larger than the bound.
#include "capture/staging_pool.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

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


// Takes the requests that StagingSlabs serves from the pool directly.
void UseUnslabbed(StagingSlabs& slabs, StagingPool& pool, const std::shared_ptr<StagingOwner>& owner) {
  for (size_t i = 0; i < StagingSlabs::kUnslabbed; ++i) {
    torch::Tensor own = slabs.Acquire(pool, {64}, torch::kFloat32, /*pinned=*/false, owner);
    ASSERT_EQ(pool.stats().allocations, 1u);  // its own 4 KiB buffer, reused each time
    ASSERT_EQ(pool.stats().reuses, i);
  }
  ASSERT_EQ(pool.stats().in_use_bytes, 0u);
  ASSERT_EQ(pool.stats().cached_bytes, 4096u);
}

TEST(StagingSlabsTest, AFewSmallBuffersStayApartManyShareOnePoolBuffer) {
  auto pool = StagingPool::Create(8 << 20);
  auto owner = std::make_shared<StagingOwner>();
  std::vector<torch::Tensor> pieces;
  {
    StagingSlabs slabs;
    ASSERT_NO_FATAL_FAILURE(UseUnslabbed(slabs, *pool, owner));
    const uint64_t before = pool->stats().allocations;
    // 1,024 tensors of 64 floats (256 bytes) fill one slab exactly.
    for (int i = 0; i < 1024; ++i) {
      pieces.push_back(slabs.Acquire(*pool, {64}, torch::kFloat32, /*pinned=*/false, owner));
      pieces.back().fill_(static_cast<float>(i));
    }
    StagingPoolStats s = pool->stats();
    EXPECT_EQ(s.allocations, before + 1);
    EXPECT_EQ(s.in_use_bytes, kSlabBytes);
    EXPECT_EQ(owner->held, kSlabBytes);
    // The next piece starts a second slab.
    pieces.push_back(slabs.Acquire(*pool, {64}, torch::kFloat32, /*pinned=*/false, owner));
    EXPECT_EQ(pool->stats().allocations, before + 2);
    EXPECT_EQ(pool->stats().in_use_bytes, 2 * kSlabBytes);
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pieces[i].data_ptr()) % kSlabAlignment, 0u) << i;
    EXPECT_TRUE(pieces[i].is_contiguous());
  }
  for (int i = 1; i < 1024; ++i) {
    EXPECT_EQ(static_cast<uint8_t*>(pieces[i].data_ptr()) - static_cast<uint8_t*>(pieces[i - 1].data_ptr()), 256);
    EXPECT_TRUE(torch::equal(pieces[i], torch::full({64}, static_cast<float>(i)))) << i;  // no overlap
  }
  // The carver is gone; a slab returns to the pool with its last piece.
  pieces.resize(1);
  EXPECT_EQ(pool->stats().in_use_bytes, kSlabBytes);
  pieces.clear();
  StagingPoolStats s = pool->stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(owner->held, 0u);
  EXPECT_EQ(s.cached_bytes, 4096u + 2 * kSlabBytes);
}

TEST(StagingSlabsTest, OddSizesRoundUpToTheAlignment) {
  auto pool = StagingPool::Create(1 << 20);
  auto owner = std::make_shared<StagingOwner>();
  StagingSlabs slabs;
  ASSERT_NO_FATAL_FAILURE(UseUnslabbed(slabs, *pool, owner));
  torch::Tensor a = slabs.Acquire(*pool, {3}, torch::kUInt8, /*pinned=*/false, owner);
  torch::Tensor b = slabs.Acquire(*pool, {2, 5}, torch::kFloat64, /*pinned=*/false, owner);
  torch::Tensor c = slabs.Acquire(*pool, {1}, torch::kBFloat16, /*pinned=*/false, owner);
  EXPECT_EQ(b.sizes(), torch::IntArrayRef({2, 5}));
  EXPECT_EQ(b.scalar_type(), torch::kFloat64);
  EXPECT_EQ(static_cast<uint8_t*>(b.data_ptr()) - static_cast<uint8_t*>(a.data_ptr()), 64);
  EXPECT_EQ(static_cast<uint8_t*>(c.data_ptr()) - static_cast<uint8_t*>(b.data_ptr()), 128);  // 80 -> 128
  EXPECT_EQ(pool->stats().in_use_bytes, kSlabBytes);
}

}  // namespace
}  // namespace trainsnap::internal
