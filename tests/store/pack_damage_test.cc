// PackDamage (src/store/pack_damage.h): which packs the chunk index names
// that are missing or short, and which index entries lost bytes with them.
#include "store/pack_damage.h"

#include <gtest/gtest.h>

#include <vector>

namespace trainsnap::internal {
namespace {

TEST(PackDamageTest, MissingAndShortPacksAreFoundAndDescribed) {
  const std::vector<PackDamage> damage = FindPackDamage({{1, 100}, {2, 200}, {3, 300}}, {{1, 100}, {2, 150}, {4, 10}});
  ASSERT_EQ(damage.size(), 2u);
  EXPECT_EQ(damage[0], (PackDamage{2, 150, 200}));
  EXPECT_EQ(damage[1], (PackDamage{3, std::nullopt, 300}));
  EXPECT_EQ(damage[0].Describe(),
            "packs/pack-00000002.pack has 150 bytes, the "
            "chunk index places chunks up to byte 200");
  EXPECT_EQ(damage[1].Describe(), "packs/pack-00000003.pack is missing");
  PackEntry before{2, 100, 50, 34, true};  // ends at 150: still whole
  PackEntry across{2, 140, 20, 4, true};   // ends at 160: cut
  PackEntry other{1, 8, 500, 484, true};
  EXPECT_FALSE(damage[0].Covers(before));
  EXPECT_TRUE(damage[0].Covers(across));
  EXPECT_FALSE(damage[0].Covers(other));
  EXPECT_TRUE(damage[1].Covers(PackEntry{3, 8, 16, 0, true}));
  EXPECT_TRUE(FindPackDamage({{1, 100}}, {{1, 100}}).empty());
}

}  // namespace
}  // namespace trainsnap::internal
