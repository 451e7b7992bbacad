#include "torch/base_identity.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/training_rig.h"

namespace trainsnap::internal {
namespace {

using capture_test::LoraNet;

TEST(BaseIdentityTest, DescribesFrozenParametersAndLabel) {
  torch::manual_seed(0);
  LoraNet net;
  auto contract = BuildContract({{"", net.ptr().get()}});
  ASSERT_TRUE(contract.ok());
  BaseIdentityBuilder builder;
  proto::BaseIdentity identity = builder.Build(*contract, "llama-7b@rev3", /*hash_content=*/false);
  ASSERT_EQ(identity.frozen_size(), 4);
  EXPECT_EQ(identity.frozen(0).name(), "l1.base.weight");
  EXPECT_EQ(std::vector<int64_t>(identity.frozen(0).shape().begin(), identity.frozen(0).shape().end()),
            (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(identity.frozen(0).dtype(), static_cast<uint32_t>(DType::kFloat32));
  EXPECT_EQ(identity.frozen(1).name(), "l1.base.bias");
  EXPECT_FALSE(identity.has_content_hash());
  EXPECT_EQ(identity.label(), "llama-7b@rev3");
}

TEST(BaseIdentityTest, ContentHashIsCachedAndFollowsInPlaceWrites) {
  torch::manual_seed(0);
  LoraNet a;
  torch::manual_seed(0);
  LoraNet b;
  auto ca = BuildContract({{"", a.ptr().get()}});
  auto cb = BuildContract({{"", b.ptr().get()}});
  ASSERT_TRUE(ca.ok() && cb.ok());
  BaseIdentityBuilder builder_a, builder_b;
  const uint64_t hash_a = builder_a.ContentHash(*ca);
  EXPECT_EQ(builder_b.ContentHash(*cb), hash_a);  // same bytes, other tensors
  EXPECT_EQ(builder_a.ContentHash(*ca), hash_a);  // cached
  {
    torch::NoGradGuard guard;
    a->l2->base->weight[3][5] += 1.0f;  // bumps _version
  }
  const uint64_t changed = builder_a.ContentHash(*ca);
  EXPECT_NE(changed, hash_a);
  proto::BaseIdentity identity = builder_a.Build(*ca, "", /*hash_content=*/true);
  EXPECT_TRUE(identity.has_content_hash());
  EXPECT_EQ(identity.content_hash(), changed);
}

}  // namespace
}  // namespace trainsnap::internal
