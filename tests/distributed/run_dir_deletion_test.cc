// The run-directory deletion protocol's steps on real stores (no LibTorch).
#include "distributed/run_dir_deletion.h"

#include <gtest/gtest.h>

#include "distributed/run_dir.h"
#include "testing/store_fixtures.h"

namespace trainsnap::internal {
namespace {

using testing::TempDir;
using testing::TestStoreOptions;
using testing::WriteSnapshot;

std::vector<int64_t> Steps(Store& store) {
  Result<std::vector<SnapshotInfo>> listed = store.List();
  EXPECT_TRUE(listed.ok()) << listed.status().ToString();
  std::vector<int64_t> steps;
  if (!listed.ok()) return steps;
  for (const SnapshotInfo& info : *listed) steps.push_back(info.step);
  return steps;
}

std::unique_ptr<Store> StoreWith(const std::string& path, const std::vector<int64_t>& steps) {
  auto store = Store::Open(path, TestStoreOptions(/*sync=*/false));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  for (int64_t step : steps) EXPECT_TRUE(WriteSnapshot(**store, step, {}).ok());
  return std::move(store).value();
}

TEST(RunDirDeletionTest, CountRankStoresCountsTheConsecutiveRankDirectories) {
  TempDir dir;
  EXPECT_EQ(CountRankStores(dir.path()), 0);
  for (int r : {0, 1, 2, 4}) StoreWith(RankStorePath(dir.path(), r), {});
  EXPECT_EQ(CountRankStores(dir.path()), 3);  // rank-00004 follows a gap
  EXPECT_EQ(CountRankStores(dir.path(), 4), 5);
  EXPECT_EQ(CountRankStores(dir.path(), 3), 3);
}

TEST(RunDirDeletionTest, DeleteGlobalStepsCountsStepsGoneIncludingThoseAbsentAlready) {
  TempDir dir;
  auto global = StoreWith(dir.Sub("global"), {1, 2, 3, 4});
  size_t deleted = 99;
  ASSERT_TRUE(DeleteGlobalSteps(*global, {1, 2}, &deleted).ok());
  EXPECT_EQ(deleted, 2u);
  // A rerun after a crash: step 2 is gone already, step 3 goes now.
  ASSERT_TRUE(DeleteGlobalSteps(*global, {2, 3}, &deleted).ok());
  EXPECT_EQ(deleted, 2u);
  EXPECT_EQ(Steps(*global), (std::vector<int64_t>{4}));
  ASSERT_TRUE(RollbackGlobalSteps(*global, 4).ok());
  Status missing = RollbackGlobalSteps(*global, 3);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.message().rfind("global store: ", 0), 0u) << missing.message();
}

TEST(RunDirDeletionTest, DeleteGlobalStepsStopsAtTheFirstFailure) {
  TempDir dir;
  auto global = StoreWith(dir.Sub("global"), {1, 2, 3});
  global.reset();
  auto read_only = Store::OpenReadOnly(dir.Sub("global"));
  ASSERT_TRUE(read_only.ok());
  size_t deleted = 99;
  Status refused = DeleteGlobalSteps(**read_only, {1, 2}, &deleted);
  EXPECT_EQ(refused.code(), StatusCode::kNotSupported);
  EXPECT_EQ(refused.message().rfind("global store: delete step 1: ", 0), 0u) << refused.message();
  EXPECT_EQ(deleted, 0u);
  EXPECT_EQ(Steps(**read_only), (std::vector<int64_t>{1, 2, 3}));
}

TEST(RunDirDeletionTest, DeleteRankSnapshotsDeletesOnlyWhatTheStoreHolds) {
  TempDir dir;
  auto rank = StoreWith(RankStorePath(dir.path(), 3), {2, 4, 6});
  ASSERT_TRUE(DeleteRankSnapshots(*rank, {1, 2, 5, 6}).ok());
  EXPECT_EQ(Steps(*rank), (std::vector<int64_t>{4}));
}

TEST(RunDirDeletionTest, DeleteRankSnapshotsAfterWorksWhetherOrNotTheStoreHoldsTheStep) {
  TempDir dir;
  auto holds = StoreWith(RankStorePath(dir.path(), 0), {1, 2, 3, 4});
  ASSERT_TRUE(DeleteRankSnapshotsAfter(*holds, 2).ok());
  EXPECT_EQ(Steps(*holds), (std::vector<int64_t>{1, 2}));
  auto lacks = StoreWith(RankStorePath(dir.path(), 1), {1, 4, 5});  // a store of another world size
  ASSERT_TRUE(DeleteRankSnapshotsAfter(*lacks, 3).ok());
  EXPECT_EQ(Steps(*lacks), (std::vector<int64_t>{1}));
}

TEST(RunDirDeletionTest, LocalOnlyStepsAreTheSnapshotsOfStepsNotGlobalForThisStore) {
  TempDir dir;
  auto rank = StoreWith(RankStorePath(dir.path(), 0), {1, 2, 3, 7});
  Result<std::vector<int64_t>> local_only = LocalOnlySteps(*rank, {2, 3, 5});
  ASSERT_TRUE(local_only.ok());
  EXPECT_EQ(*local_only, (std::vector<int64_t>{1, 7}));
}

}  // namespace
}  // namespace trainsnap::internal
