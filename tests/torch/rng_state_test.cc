#include "torch/rng_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/training_rig.h"

namespace trainsnap::internal {
namespace {

using capture_test::BitwiseEqual;

TEST(RngStateTest, CapturedStateReplaysTheSameDraws) {
  torch::manual_seed(5);
  torch::randn({3});
  google::protobuf::RepeatedPtrField<proto::GeneratorState> states;
  ASSERT_TRUE(CaptureRng(&states).ok());
  ASSERT_GE(states.size(), 1);
  EXPECT_EQ(states[0].device(), "cpu");
  EXPECT_EQ(states[0].state().size(), 5056u);
  torch::Tensor reference = torch::randn({100});
  torch::Tensor dropped = torch::dropout(torch::ones({100}), 0.5, /*train=*/true);
  torch::manual_seed(99);
  auto prepared = PrepareRng(states);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  ApplyRng(*prepared);
  EXPECT_TRUE(BitwiseEqual(torch::randn({100}), reference));
  EXPECT_TRUE(BitwiseEqual(torch::dropout(torch::ones({100}), 0.5, true), dropped));
}

TEST(RngStateTest, BadStatesAreRejectedWithoutTouchingTheGenerator) {
  torch::manual_seed(11);
  torch::Tensor before = at::detail::getDefaultCPUGenerator().get_state();
  google::protobuf::RepeatedPtrField<proto::GeneratorState> states;
  ASSERT_TRUE(CaptureRng(&states).ok());
  states[0].mutable_state()->resize(10);
  EXPECT_EQ(PrepareRng(states).status().code(), StatusCode::kCorruption);

  google::protobuf::RepeatedPtrField<proto::GeneratorState> absent;
  ASSERT_TRUE(CaptureRng(&absent).ok());
  absent[0].set_device("cuda:7");
  auto result = PrepareRng(absent);
  EXPECT_EQ(result.status().code(), StatusCode::kContractMismatch);
  EXPECT_EQ(result.status().message(), "RNG state of device cuda:7: no such generator in this process");
  EXPECT_TRUE(BitwiseEqual(at::detail::getDefaultCPUGenerator().get_state(), before));
}

}  // namespace
}  // namespace trainsnap::internal
