// OverheadBudget with exact time points: validation, the first capture's
// estimate, the skip rule and the cost prediction.
#include "checkpointer/overhead_budget.h"

#include <chrono>
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

// Named, as the test sources are built in unity (shared anonymous namespace).
namespace trainsnap::internal::budget_test {
namespace {

using Clock = OverheadBudget::Clock;
using std::chrono::milliseconds;

const Clock::time_point kT0 = Clock::time_point() + std::chrono::hours(1);

TEST(OverheadBudgetTest, ValidateAcceptsZeroAndFractionsBelowOne) {
  EXPECT_TRUE(OverheadBudget::Validate(0).ok());
  EXPECT_TRUE(OverheadBudget::Validate(0.02).ok());
  EXPECT_TRUE(OverheadBudget::Validate(0.999).ok());
  for (double bad :
       {-0.01, 1.0, 1.5, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    Status status = OverheadBudget::Validate(bad);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("overhead_budget"), std::string::npos) << status.ToString();
  }
}

TEST(OverheadBudgetTest, OffNeverSkips) {
  OverheadBudget budget(0, kT0);
  EXPECT_FALSE(budget.enabled());
  EXPECT_FALSE(budget.needs_estimate());
  budget.Record(kT0, kT0 + milliseconds(100));
  EXPECT_FALSE(budget.ShouldSkip(kT0 + milliseconds(101)));
}

TEST(OverheadBudgetTest, AFirstCaptureWithoutAnEstimateRuns) {
  OverheadBudget budget(0.01, kT0);
  EXPECT_TRUE(budget.enabled());
  EXPECT_TRUE(budget.needs_estimate());
  EXPECT_FALSE(budget.ShouldSkip(kT0));
  EXPECT_EQ(budget.predicted_seconds(), 0);
}

TEST(OverheadBudgetTest, TheFirstCaptureWaitsUntilTheWallTimePaysForItsEstimate) {
  OverheadBudget budget(0.02, kT0);
  // 300 MB at kFirstCaptureBytesPerSecond (1 GB/s): 0.3 s. It fits once
  // 0.3 / (elapsed + 0.3) <= 0.02, i.e. elapsed >= 0.3 * 49 = 14.7 s.
  budget.EstimateFirst(300'000'000);
  EXPECT_FALSE(budget.needs_estimate());
  EXPECT_DOUBLE_EQ(budget.predicted_seconds(), 0.3);
  EXPECT_TRUE(budget.ShouldSkip(kT0));
  EXPECT_TRUE(budget.ShouldSkip(kT0 + milliseconds(14'690)));
  EXPECT_FALSE(budget.ShouldSkip(kT0 + milliseconds(14'710)));
}

TEST(OverheadBudgetTest, AnEmptyEstimateRunsAtOnce) {
  OverheadBudget budget(0.02, kT0);
  budget.EstimateFirst(0);
  EXPECT_FALSE(budget.needs_estimate());
  EXPECT_FALSE(budget.ShouldSkip(kT0));
  EXPECT_FALSE(budget.ShouldSkip(kT0 + milliseconds(1)));
}

TEST(OverheadBudgetTest, TheFirstMeasuredCostReplacesTheEstimate) {
  OverheadBudget budget(0.5, kT0);
  budget.EstimateFirst(1'000'000'000);
  EXPECT_DOUBLE_EQ(budget.predicted_seconds(), 1.0);
  budget.Record(kT0 + milliseconds(2'000), kT0 + milliseconds(2'010));
  EXPECT_DOUBLE_EQ(budget.predicted_seconds(), 0.010);
  EXPECT_FALSE(budget.needs_estimate());
}

TEST(OverheadBudgetTest, SkipsUntilTheSpentAndPredictedCostFitInTheElapsedTime) {
  OverheadBudget budget(0.1, kT0);
  budget.Record(kT0, kT0 + milliseconds(10));
  // (10 spent + 10 predicted) / (100 elapsed + 10) = 0.18 > 0.1.
  EXPECT_TRUE(budget.ShouldSkip(kT0 + milliseconds(100)));
  // 20 / (189 + 10) = 0.1005 > 0.1; 20 / (191 + 10) = 0.0995.
  EXPECT_TRUE(budget.ShouldSkip(kT0 + milliseconds(189)));
  EXPECT_FALSE(budget.ShouldSkip(kT0 + milliseconds(191)));
  budget.Record(kT0 + milliseconds(191), kT0 + milliseconds(201));
  // (20 + 10) / (300 + 10) = 0.097: fits; at 250, 30 / 260 = 0.115 does not.
  EXPECT_TRUE(budget.ShouldSkip(kT0 + milliseconds(250)));
  EXPECT_FALSE(budget.ShouldSkip(kT0 + milliseconds(300)));
}

TEST(OverheadBudgetTest, PredictionIsAnAverageWeightedTowardsTheNewestCost) {
  OverheadBudget budget(0.5, kT0);
  budget.Record(kT0, kT0 + milliseconds(10));
  EXPECT_DOUBLE_EQ(budget.predicted_seconds(), 0.010);
  budget.Record(kT0 + milliseconds(100), kT0 + milliseconds(130));
  EXPECT_DOUBLE_EQ(budget.predicted_seconds(), 0.020);
  budget.Record(kT0 + milliseconds(200), kT0 + milliseconds(220));
  EXPECT_DOUBLE_EQ(budget.predicted_seconds(), 0.020);
}

}  // namespace
}  // namespace trainsnap::internal::budget_test
