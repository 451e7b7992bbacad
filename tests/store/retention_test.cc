#include "store/retention.h"

#include <gtest/gtest.h>

namespace trainsnap::internal {
namespace {

TEST(RetentionTest, StepsOutsidePolicyKeepsNewestAndMultiples) {
  std::vector<int64_t> steps = {0, 5, 10, 15, 20, 25, 30};
  EXPECT_EQ(StepsOutsidePolicy(steps, {2, 0}), (std::vector<int64_t>{0, 5, 10, 15, 20}));
  EXPECT_EQ(StepsOutsidePolicy(steps, {2, 10}), (std::vector<int64_t>{5, 15}));
  EXPECT_EQ(StepsOutsidePolicy(steps, {7, 0}), (std::vector<int64_t>{}));
  EXPECT_EQ(StepsOutsidePolicy(steps, {100, 3}), (std::vector<int64_t>{}));
  EXPECT_EQ(StepsOutsidePolicy(steps, {0, 10}), (std::vector<int64_t>{}));  // keep_last 0 keeps all
  EXPECT_EQ(StepsOutsidePolicy({-4, -3, 1}, {1, 2}), (std::vector<int64_t>{-3}));
}

TEST(RetentionTest, TheNewestStepIsKeptWhateverTheMultiples) {
  EXPECT_EQ(StepsOutsidePolicy({1, 2, 3}, {1, 0}), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(StepsOutsidePolicy({3}, {1, 2}), (std::vector<int64_t>{}));
  EXPECT_EQ(StepsOutsidePolicy({}, {1, 0}), (std::vector<int64_t>{}));
}

}  // namespace
}  // namespace trainsnap::internal
