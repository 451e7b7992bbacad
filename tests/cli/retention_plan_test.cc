#include "cli/retention_plan.h"

#include <gtest/gtest.h>

#include "cli_fixture.h"

namespace trainsnap::cli_test {
namespace {

using cli::PlanDeletion;

class PlanDeletionTest : public CliTest {};

TEST_F(PlanDeletionTest, CountsOnlyChunksNoKeptSnapshotNeedsAndAgreesWithGc) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  // 4 chunks of 4 KiB; step 2 changes one chunk, step 3 all of them.
  std::vector<float> a = RandomFloats(4096, 1);
  auto s1 = WriteSnapshot(*store, 1, {{0xA, "param", DType::kFloat32, {4096}, FloatBytes(a)}});
  ASSERT_TRUE(s1.ok()) << s1.status().ToString();
  a[1500] += 1.0f;
  auto s2 = WriteSnapshot(*store, 2, {{0xA, "param", DType::kFloat32, {4096}, FloatBytes(a)}});
  ASSERT_TRUE(s2.ok()) << s2.status().ToString();
  auto s3 = WriteSnapshot(*store, 3, {{0xA, "param", DType::kFloat32, {4096}, FloatBytes(RandomFloats(4096, 2))}});
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();
  EXPECT_EQ(s2->new_chunks, 1u);
  EXPECT_EQ(s3->new_chunks, 4u);

  auto plan = PlanDeletion(*store, {2, 3});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->deleted.size(), 2u);
  EXPECT_EQ(plan->deleted[0].step, 2);
  EXPECT_EQ(plan->deleted[1].step, 3);
  EXPECT_EQ(plan->kept, 1u);
  EXPECT_EQ(plan->reclaimable_chunks, 5u);
  EXPECT_EQ(plan->reclaimable_bytes, s2->new_bytes + s3->new_bytes);

  EXPECT_EQ(plan->unreferenced_chunks, 0u);

  // Step 2's changed chunk is an XOR delta (a few bytes) whose base is step
  // 1's version of that chunk; step 1's other chunks are step 2's own. So
  // deleting step 1 alone frees nothing, and the collection agrees.
  ASSERT_LT(s2->new_bytes, 1024u) << "step 2's changed chunk was not stored as a delta";
  auto only_first = PlanDeletion(*store, {1});
  ASSERT_TRUE(only_first.ok()) << only_first.status().ToString();
  EXPECT_EQ(only_first->reclaimable_chunks, 0u);
  EXPECT_EQ(only_first->reclaimable_bytes, 0u);

  auto missing = PlanDeletion(*store, {7});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  ASSERT_TRUE(store->Delete(1).ok());
  auto gc = store->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->chunks_deleted, 0u);
  // Now step 2 alone needs the base: deleting 2 and 3 frees everything.
  auto rest = PlanDeletion(*store, {2, 3});
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  ASSERT_TRUE(store->Delete(2).ok());
  ASSERT_TRUE(store->Delete(3).ok());
  auto all = store->CollectGarbage();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(rest->reclaimable_bytes, all->bytes_deleted);
  EXPECT_EQ(rest->reclaimable_chunks, all->chunks_deleted);
  EXPECT_EQ(all->chunks_live, 0u);
}

}  // namespace
}  // namespace trainsnap::cli_test
