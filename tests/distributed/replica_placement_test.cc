// ReplicaPlacement alone: owners balanced by bytes, the same on every rank,
// and the replica hashes computed on its pool, equal for equal bytes, of the
// blocks the sample picks.
#include "distributed/replica_placement.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>

namespace trainsnap::internal {
namespace {

std::vector<PlacementCandidate> Candidates(const std::vector<torch::Tensor>& tensors) {
  std::vector<PlacementCandidate> out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    out.push_back({"t" + std::to_string(i), i % 2 ? "exp_avg" : "param", static_cast<uint64_t>(tensors[i].nbytes()),
                   tensors[i]});
  }
  return out;
}

TEST(ReplicaPlacementTest, OwnersAreGreedyLargestFirstToTheLeastLoadedRank) {
  EXPECT_EQ(AssignOwners({10, 30, 20, 20}, 2), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(AssignOwners({5, 5, 5}, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(AssignOwners({}, 4), (std::vector<int>{}));
}

TEST(ReplicaPlacementTest, EveryRankPlacesTheSameOwnersAndHashesEqualBytesEqually) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> tensors{torch::randn({300000}), torch::randn({7, 5}), torch::randn({4}),
                                     torch::randn({3, 8}).t()};  // a view that is not contiguous
  std::vector<Placed> placed;
  std::vector<std::vector<std::string>> sources;
  for (int rank = 0; rank < 2; ++rank) {
    ReplicaPlacement placement(true, true, /*verify=*/true, rank, 2, /*hash_threads=*/3);
    Result<std::vector<std::string>> placed_sources = placement.Place(4, Candidates(tensors));
    ASSERT_TRUE(placed_sources.ok()) << placed_sources.status().ToString();
    sources.push_back(*placed_sources);
    Result<std::optional<Placed>> taken = placement.Take(4);
    ASSERT_TRUE(taken.ok() && taken->has_value());
    placed.push_back(**taken);
    EXPECT_FALSE(placement.Take(4)->has_value());  // taken once
  }
  // Rank 0 keeps the big tensor, rank 1 the rest.
  EXPECT_EQ(sources[0], (std::vector<std::string>{"", "rank-00001", "rank-00001", "rank-00001"}));
  EXPECT_EQ(sources[1], (std::vector<std::string>{"rank-00000", "", "", ""}));
  EXPECT_EQ(placed[0].owned_bytes, 1200000u);
  EXPECT_EQ(placed[1].owned_bytes, (35 + 4 + 24) * 4u);
  EXPECT_EQ(placed[0].fingerprint, placed[1].fingerprint);
  EXPECT_EQ(placed[0].hashes, placed[1].hashes);
  EXPECT_EQ(placed[0].hashed_bytes, (300000 + 35 + 4 + 24) * 4u);  // stride 1: every byte
  ASSERT_EQ(placed[0].hashes.size(), 4u);
  EXPECT_EQ(placed[0].names[3], "`t3` role exp_avg");
  // The hash is of the bytes: a contiguous copy hashes as the view, one
  // changed element changes it.
  ReplicaPlacement placement(true, true, true, 0, 2, 1);
  std::vector<torch::Tensor> changed{tensors[0].clone(), tensors[1], tensors[2], tensors[3].contiguous()};
  changed[0][299999] += 1;
  ASSERT_TRUE(placement.Place(5, Candidates(changed)).ok());
  Result<std::optional<Placed>> taken = placement.Take(5);
  ASSERT_TRUE(taken.ok() && taken->has_value());
  EXPECT_NE((*taken)->hashes[0], placed[0].hashes[0]);
  EXPECT_EQ((*taken)->hashes[3], placed[0].hashes[3]);
}

TEST(ReplicaPlacementTest, TheSampleIsOneBlockInTheStrideAtAnOffsetDrawnFromTheStep) {
  // Under 2 MiB in all: every block; then one in bytes / 1 MiB, up to the
  // stride asked for.
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  EXPECT_EQ(SampleStride(0, 32), 1u);
  EXPECT_EQ(SampleStride(2 * kMiB - 1, 32), 1u);
  EXPECT_EQ(SampleStride(2 * kMiB, 32), 2u);
  EXPECT_EQ(SampleStride(129 * kMiB, 8), 8u);
  EXPECT_EQ(SampleStride(uint64_t{1} << 40, 32), 32u);
  EXPECT_EQ(SampleStride(uint64_t{1} << 40, 1), 1u);
  EXPECT_EQ(SampleStride(uint64_t{1} << 40, 0), 1u);
  EXPECT_EQ(SampleOffset(7, 1), 0u);
  // Every offset comes up, whatever steps a run captures (here every 16th).
  std::vector<int> seen(32, 0);
  for (int64_t step = 0; step < 16 * 400; step += 16) {
    const uint64_t offset = SampleOffset(step, 32);
    ASSERT_LT(offset, 32u);
    EXPECT_EQ(offset, SampleOffset(step, 32));  // the same on every rank
    ++seen[offset];
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 0), 0);
}

TEST(ReplicaPlacementTest, AStrideHashesTheSampledBlocksOnlyAndAViewAsItsContiguousCopy) {
  constexpr int64_t kBlockFloats = kReplicaHashBlock / sizeof(float);
  torch::manual_seed(5);
  // 10 blocks, a bias of 4 KiB (one short block) and 6 blocks (a transposed
  // view): 16 MiB in all, sampled one block in 4 at stride 4 (16 at 32).
  std::vector<torch::Tensor> tensors{torch::randn({10 * kBlockFloats}), torch::randn({1024}),
                                     torch::randn({512, 3 * 1024}).t()};
  ASSERT_EQ(SampleStride(16 * kReplicaHashBlock + 4096, 4), 4u);
  auto hashes = [](const std::vector<torch::Tensor>& t, int64_t step, int stride) {
    ReplicaPlacement placement(true, true, true, 0, 2, 2, stride);
    EXPECT_TRUE(placement.Place(step, Candidates(t)).ok());
    Result<std::optional<Placed>> taken = placement.Take(step);
    EXPECT_TRUE(taken.ok() && taken->has_value());
    return **taken;
  };
  // Steps whose sample starts at offset 0 and at offset 1.
  int64_t at_zero = -1, at_one = -1;
  for (int64_t step = 0; at_zero < 0 || at_one < 0; ++step) {
    if (SampleOffset(step, 4) == 0 && at_zero < 0) at_zero = step;
    if (SampleOffset(step, 4) == 1 && at_one < 0) at_one = step;
  }
  const Placed base = hashes(tensors, at_zero, 4);
  // Blocks 0, 4, 8 of the first tensor, none of the bias (block 10), and 12,
  // 16 (global) of the third: 5 MiB, hashed on the pool (4 MiB or more).
  EXPECT_EQ(base.hashed_bytes, 5 * kReplicaHashBlock);
  EXPECT_EQ(hashes(tensors, at_one, 4).hashed_bytes, 4 * kReplicaHashBlock);  // 1, 5, 9 and 13
  EXPECT_EQ(hashes(tensors, at_zero, 1).hashed_bytes, 16 * kReplicaHashBlock + 4096);
  // The view hashes as its contiguous copy.
  std::vector<torch::Tensor> copied{tensors[0], tensors[1], tensors[2].contiguous()};
  EXPECT_EQ(hashes(copied, at_zero, 4).hashes, base.hashes);
  // One element changed in block 4: seen by the sample at offset 0, not by
  // the one at offset 1; stride 1 sees it at any step.
  std::vector<torch::Tensor> changed{tensors[0].clone(), tensors[1], tensors[2]};
  changed[0][4 * kBlockFloats + 3] += 1;
  EXPECT_NE(hashes(changed, at_zero, 4).hashes[0], base.hashes[0]);
  EXPECT_EQ(hashes(changed, at_one, 4).hashes[0], hashes(tensors, at_one, 4).hashes[0]);
  EXPECT_NE(hashes(changed, at_one, 1).hashes[0], hashes(tensors, at_one, 1).hashes[0]);
  EXPECT_EQ(hashes(changed, at_zero, 4).hashes[2], base.hashes[2]);
  // A bias changed: seen at offset 2 (block 10), not at offset 0.
  std::vector<torch::Tensor> bias{tensors[0], tensors[1].clone(), tensors[2]};
  bias[1][7] += 1;
  EXPECT_EQ(hashes(bias, at_zero, 4).hashes[1], base.hashes[1]);
  int64_t at_two = 0;
  while (SampleOffset(at_two, 4) != 2) ++at_two;
  EXPECT_NE(hashes(bias, at_two, 4).hashes[1], hashes(tensors, at_two, 4).hashes[1]);
}

TEST(ReplicaPlacementTest, WithoutTheCheckNothingIsHashedAndShardedStateStaysLocal) {
  std::vector<torch::Tensor> tensors{torch::ones({10}), torch::ones({10})};
  ReplicaPlacement placement(true, /*optimizer_replicated=*/false, /*verify=*/false, 1, 2, 1);
  Result<std::vector<std::string>> sources = placement.Place(1, Candidates(tensors));
  ASSERT_TRUE(sources.ok());
  EXPECT_EQ(*sources, (std::vector<std::string>{"rank-00000", ""}));  // the exp_avg is this rank's shard
  Result<std::optional<Placed>> taken = placement.Take(1);
  ASSERT_TRUE(taken.ok() && taken->has_value());
  EXPECT_TRUE((*taken)->hashes.empty());
  EXPECT_FALSE(placement.Take(2)->has_value());
}

}  // namespace
}  // namespace trainsnap::internal
