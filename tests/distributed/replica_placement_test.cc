// ReplicaPlacement alone: owners balanced by bytes, the same on every rank,
// and the replica hashes computed on its pool, equal for equal bytes.
#include "distributed/replica_placement.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

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
