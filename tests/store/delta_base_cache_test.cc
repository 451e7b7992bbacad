#include "store/delta_base_cache.h"

#include <gtest/gtest.h>

namespace trainsnap::internal {
namespace {

std::shared_ptr<DeltaBase> Base(size_t raw_bytes, uint8_t fill) {
  auto b = std::make_shared<DeltaBase>();
  b->dtype = DType::kUInt8;
  b->bytes = raw_bytes;
  b->chunk = raw_bytes;
  b->hashes.resize(1);
  b->depths = {3};
  b->raw = {std::make_shared<const std::vector<uint8_t>>(raw_bytes, fill)};
  return b;
}

TEST(DeltaBaseCacheTest, PublishReplacesAndKeepsWithinBudget) {
  DeltaBaseCache cache;
  cache.SetBudget(100);
  EXPECT_EQ(cache.Find({1, "param"}), nullptr);
  cache.Publish({{{1, "param"}, Base(60, 1)}, {{2, "param"}, Base(30, 2)}});
  EXPECT_EQ(cache.held_bytes(), 90u);
  // Over budget: the entry stays (hashes, depths) without its bytes.
  cache.Publish({{{3, "param"}, Base(20, 3)}});
  auto third = cache.Find({3, "param"});
  ASSERT_NE(third, nullptr);
  EXPECT_TRUE(third->raw.empty());
  EXPECT_EQ(third->depths, std::vector<uint8_t>{3});
  EXPECT_EQ(cache.held_bytes(), 90u);
  // Replacing an entry releases its old bytes first.
  cache.Publish({{{1, "param"}, Base(70, 4)}});
  auto first = cache.Find({1, "param"});
  ASSERT_NE(first, nullptr);
  ASSERT_EQ(first->raw.size(), 1u);
  EXPECT_EQ(*first->raw[0], std::vector<uint8_t>(70, 4));
  EXPECT_EQ(cache.held_bytes(), 100u);
  EXPECT_EQ(cache.Find({1, "exp_avg"}), nullptr);
}

// Consecutive versions share the buffers of the chunks whose keyframe
// stays: each is counted once, by the entry that holds it.
TEST(DeltaBaseCacheTest, SharedChunkBuffersAreCountedByTheEntryThatHoldsThem) {
  DeltaBaseCache cache;
  cache.SetBudget(1000);
  auto v1 = Base(0, 0);
  v1->raw = {std::make_shared<const std::vector<uint8_t>>(100, 1), std::make_shared<const std::vector<uint8_t>>(50, 2)};
  cache.Publish({{{1, "param"}, v1}});
  EXPECT_EQ(cache.held_bytes(), 150u);
  auto v2 = std::make_shared<DeltaBase>(*cache.Find({1, "param"}));  // chunk 0 a delta: its keyframe stays
  v2->raw[1] = std::make_shared<const std::vector<uint8_t>>(50, 3);
  cache.Publish({{{1, "param"}, v2}});
  EXPECT_EQ(cache.held_bytes(), 150u);
  auto found = cache.Find({1, "param"});
  EXPECT_EQ(found->raw[0].get(), v1->raw[0].get());
  EXPECT_EQ((*found->raw[1])[0], 3);
}

}  // namespace
}  // namespace trainsnap::internal
