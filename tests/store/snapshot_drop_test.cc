#include "store/snapshot_drop.h"

#include <gtest/gtest.h>

#include <vector>

#include "store_test_util.h"
#include "testing/store_test.h"
#include "testing/temp_dir.h"
#include "trainsnap/store.h"

namespace trainsnap::testing {
namespace {

using internal::DropSnapshots;

std::vector<int64_t> StoredSteps(Store& store) {
  std::vector<int64_t> steps;
  auto listed = store.List();
  EXPECT_TRUE(listed.ok()) << listed.status().ToString();
  if (listed.ok()) {
    for (const SnapshotInfo& info : *listed) steps.push_back(info.step);
  }
  return steps;
}

// What a full collection would still find after a drop: nothing.
void ExpectNoGarbageLeft(Store& store) {
  auto stats = store.Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->collectable_chunks, 0u);
  auto gc = store.CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->chunks_deleted, 0u);
}

class SnapshotDropTest : public StoreTest {};

TEST_F(SnapshotDropTest, DeletesTheGivenStepsAndTheChunksOnlyTheyReferenced) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  const std::vector<float> shared = NormalFloats(1000, 1);  // one 4 KiB chunk each
  std::vector<std::vector<float>> own;
  for (int i = 0; i < 5; ++i) own.push_back(NormalFloats(1000, 10 + i));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(WriteSnapshot(*store_, i + 1, {{1, &own[i]}, {2, &shared}}).ok());

  // Step 7 is not stored: skipped. Steps are deleted whatever their order.
  auto report = DropSnapshots(*store_, {3, 7, 1});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->deleted_steps, (std::vector<int64_t>{1, 3}));
  // The candidates: own[0] and own[2]; shared is still referenced.
  EXPECT_EQ(report->gc.chunks_scanned, 2u);
  EXPECT_EQ(report->gc.chunks_deleted, 2u);
  EXPECT_EQ(report->gc.chunks_live, 0u);
  EXPECT_EQ(StoredSteps(*store_), (std::vector<int64_t>{2, 4, 5}));
  for (int step : {2, 4, 5}) {
    EXPECT_EQ(ReadFloats(*store_, step, 1), own[step - 1]) << "step " << step;
    EXPECT_EQ(ReadFloats(*store_, step, 2), shared) << "step " << step;
  }
  ASSERT_NO_FATAL_FAILURE(ExpectNoGarbageLeft(*store_));
  auto verify = store_->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok());
}

TEST_F(SnapshotDropTest, NothingToDeleteChangesNothing) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  const std::vector<float> a = NormalFloats(1000, 2);
  ASSERT_TRUE(WriteSnapshot(*store_, 1, {{1, &a}}).ok());
  for (const std::vector<int64_t>& steps : {std::vector<int64_t>{}, std::vector<int64_t>{0, 2, -1}}) {
    auto report = DropSnapshots(*store_, steps);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_TRUE(report->deleted_steps.empty());
    EXPECT_EQ(report->gc.chunks_deleted, 0u);
  }
  EXPECT_EQ(StoredSteps(*store_), (std::vector<int64_t>{1}));
  EXPECT_EQ(ReadFloats(*store_, 1, 1), a);
}

// A delta's base outlives the snapshot that wrote it while a kept snapshot's
// delta needs it, and goes with the last delta that needs it.
TEST_F(SnapshotDropTest, KeepsTheDeltaBasesOfKeptSnapshots) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(DeltaOptions(4)));  // one chunk per tensor
  const std::vector<float> v0 = NormalFloats(4096, 3);
  const std::vector<float> v1 = Evolve(v0, 1, 31), v2 = Evolve(v1, 1, 32);
  const std::vector<std::vector<float>> values = {v0, v1, v2};
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(WriteSnapshot(*store_, i + 1, {{1, &values[i]}}).ok());
  auto before = store_->Stats();
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->chunks, 3u);  // v0, then deltas v1 (of v0) and v2 (of v1)

  auto first = DropSnapshots(*store_, {1, 2});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->deleted_steps, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(first->gc.chunks_deleted, 0u);  // step 3's delta needs both bases
  EXPECT_EQ(ReadFloats(*store_, 3, 1), v2);
  ASSERT_NO_FATAL_FAILURE(ExpectNoGarbageLeft(*store_));

  ASSERT_TRUE(WriteSnapshot(*store_, 4, {{1, &v0}}).ok());  // v0 again: the same chunk
  auto second = DropSnapshots(*store_, {3});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->gc.chunks_deleted, 2u);  // v2's delta and v1's; v0 is step 4's
  EXPECT_EQ(ReadFloats(*store_, 4, 1), v0);
  auto after = store_->Stats();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->chunks, 1u);
  ASSERT_NO_FATAL_FAILURE(ExpectNoGarbageLeft(*store_));
}

// The packs of deleted chunks are given back once the bytes deleted since
// the last time reach a quarter of the live ones, as after a commit with
// retention (the first drop of a process gives space back: it sets the
// live figure).
TEST_F(SnapshotDropTest, GivesSpaceBackOnceTheGarbageIsAQuarterOfTheLiveBytes) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  std::vector<std::vector<float>> own;
  for (int i = 0; i < 8; ++i) own.push_back(NormalFloats(1000, 40 + i));  // one chunk each
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(WriteSnapshot(*store_, i + 1, {{1, &own[i]}}).ok());
  ASSERT_TRUE(DropSnapshots(*store_, {1}).ok());
  // 1 chunk against the 7 live at the last reclaim: below a quarter.
  auto small = DropSnapshots(*store_, {2});
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_EQ(small->gc.chunks_deleted, 1u);
  EXPECT_EQ(small->gc.packs_removed, 0u);
  auto garbage = store_->Stats();
  ASSERT_TRUE(garbage.ok());
  EXPECT_GT(garbage->pack_garbage_bytes, 0u);
  // 3 chunks since: above a quarter, the packs are compacted.
  auto large = DropSnapshots(*store_, {3, 4});
  ASSERT_TRUE(large.ok()) << large.status().ToString();
  EXPECT_EQ(large->gc.chunks_deleted, 2u);
  EXPECT_GT(large->gc.packs_removed, 0u);
  auto compacted = store_->Stats();
  ASSERT_TRUE(compacted.ok());
  EXPECT_LT(compacted->pack_garbage_bytes, garbage->pack_garbage_bytes);
  for (int step = 5; step <= 8; ++step) EXPECT_EQ(ReadFloats(*store_, step, 1), own[step - 1]) << "step " << step;
  ASSERT_NO_FATAL_FAILURE(ExpectNoGarbageLeft(*store_));
}

// Snapshots of at least kPackRotateAtCommitBytes get packs of their own:
// dropping the oldest removes its packs and copies nothing (before, they
// shared one pack, and each drop rewrote the two snapshots kept).
TEST_F(SnapshotDropTest, DroppingTheOldestLargeSnapshotRewritesNothing) {
  StoreOptions o = SmallChunks();
  o.chunk_bytes = size_t{1} << 20;
  ASSERT_NO_FATAL_FAILURE(OpenStore(o));
  for (int step = 1; step <= 6; ++step) {
    const std::vector<float> values = NormalFloats(size_t{5} << 18, 60 + step);  // 5 MiB
    ASSERT_TRUE(WriteSnapshot(*store_, step, {{1, &values}}).ok());
    if (step <= 2) continue;
    auto report = DropSnapshots(*store_, {step - 2});  // keep_last 2
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(report->gc.chunks_deleted, 5u) << "step " << step;
    EXPECT_EQ(report->gc.pack_bytes_rewritten, 0u) << "step " << step;
    EXPECT_EQ(report->gc.packs_removed, 1u) << "step " << step;
  }
  EXPECT_EQ(ReadFloats(*store_, 6, 1), NormalFloats(size_t{5} << 18, 66));
  auto stats = store_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->pack_garbage_bytes, 0u);
}

TEST_F(SnapshotDropTest, AReadOnlyStoreIsRefusedAndKeepsItsSnapshots) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  const std::vector<float> a = NormalFloats(1000, 5);
  ASSERT_TRUE(WriteSnapshot(*store_, 1, {{1, &a}}).ok());
  store_.reset();
  auto reader = Store::OpenReadOnly(StorePath());
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto refused = DropSnapshots(**reader, {1});
  EXPECT_EQ(refused.status().code(), StatusCode::kNotSupported) << refused.status().ToString();
  EXPECT_EQ(StoredSteps(**reader), (std::vector<int64_t>{1}));
  EXPECT_EQ(ReadFloats(**reader, 1, 1), a);
}

}  // namespace
}  // namespace trainsnap::testing

