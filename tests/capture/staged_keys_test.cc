#include "capture/staged_keys.h"

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

namespace trainsnap::internal {
namespace {

TEST(StagedKeysTest, RefusesAPairTwiceAndTellsRolesApart) {
  StagedKeys keys;
  EXPECT_TRUE(keys.Insert(7, "param"));
  EXPECT_TRUE(keys.Insert(7, "grad"));
  EXPECT_TRUE(keys.Insert(8, "param"));
  EXPECT_FALSE(keys.Insert(7, "param"));
  EXPECT_FALSE(keys.Insert(7, std::string("gr") + "ad"));  // by value, not by pointer
  EXPECT_TRUE(keys.Insert(7, "opt:exp_avg"));
  EXPECT_EQ(keys.size(), 4u);
}

// Grows past its reservation (and without one) and keeps every member:
// sequential IDs (hand-made ones) and hash-like ones, with several roles.
TEST(StagedKeysTest, KeepsEveryMemberAcrossGrowth) {
  for (size_t reserve : {size_t{0}, size_t{100}, size_t{100000}}) {
    StagedKeys keys;
    keys.Reserve(reserve);
    const char* roles[] = {"param", "grad", "exp_avg", "exp_avg_sq"};
    constexpr uint64_t kIds = 30000;
    for (uint64_t i = 0; i < kIds; ++i) {
      const uint64_t id = i % 2 == 0 ? i : i * 0x9E3779B97F4A7C15ull;
      for (const char* role : roles) ASSERT_TRUE(keys.Insert(id, role)) << id << " " << role;
    }
    EXPECT_EQ(keys.size(), kIds * 4);
    for (uint64_t i = 0; i < kIds; ++i) {
      const uint64_t id = i % 2 == 0 ? i : i * 0x9E3779B97F4A7C15ull;
      for (const char* role : roles) ASSERT_FALSE(keys.Insert(id, role)) << id << " " << role;
    }
    EXPECT_EQ(keys.size(), kIds * 4);
  }
}

TEST(StagedKeysTest, ClearForgetsEveryMember) {
  StagedKeys keys;
  ASSERT_TRUE(keys.Insert(1, "param"));
  ASSERT_TRUE(keys.Insert(2, "param"));
  keys.Clear();
  EXPECT_EQ(keys.size(), 0u);
  EXPECT_TRUE(keys.Insert(1, "param"));
  EXPECT_TRUE(keys.Insert(2, "param"));
  EXPECT_FALSE(keys.Insert(2, "param"));
}

}  // namespace
}  // namespace trainsnap::internal
