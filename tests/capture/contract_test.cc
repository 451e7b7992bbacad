#include "capture/contract.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <xxhash.h>

#include "capture/training_rig.h"

namespace trainsnap::internal {
namespace {

using capture_test::LoraNet;

uint64_t Xxh3(const std::string& s) { return XXH3_64bits(s.data(), s.size()); }

TEST(ContractTest, TrainableParametersByQualifiedNameWithXxh3Ids) {
  torch::manual_seed(0);
  LoraNet net;
  auto contract = BuildContract({{"", net.ptr().get()}});
  ASSERT_TRUE(contract.ok()) << contract.status().ToString();
  std::vector<std::string> names;
  for (const auto& entry : contract->trainable) {
    ASSERT_EQ(entry.names.size(), 1u);
    names.push_back(entry.names[0]);
    EXPECT_EQ(entry.id, Xxh3(entry.names[0]));
    EXPECT_EQ(entry.model, "");
  }
  EXPECT_EQ(names, (std::vector<std::string>{"l1.lora_a", "l1.lora_b", "l2.lora_a", "l2.lora_b"}));
  std::vector<std::string> frozen;
  for (const auto& entry : contract->frozen) frozen.push_back(entry.names[0]);
  EXPECT_EQ(frozen, (std::vector<std::string>{"l1.base.weight", "l1.base.bias", "l2.base.weight", "l2.base.bias"}));
  EXPECT_EQ(contract->param_ids.size(), 8u);
  EXPECT_EQ(contract->param_ids.at(net->l1->lora_a.unsafeGetTensorImpl()), Xxh3("l1.lora_a"));
  EXPECT_EQ(contract->trainable_index.at(Xxh3("l2.lora_b")), 3u);
}

TEST(ContractTest, NamedModelsQualifyIdsWithTheirKey) {
  torch::manual_seed(0);
  LoraNet gen, disc;
  auto contract = BuildContract({{"disc", disc.ptr().get()}, {"gen", gen.ptr().get()}});
  ASSERT_TRUE(contract.ok()) << contract.status().ToString();
  ASSERT_EQ(contract->trainable.size(), 8u);
  EXPECT_EQ(contract->trainable[0].names[0], "disc/l1.lora_a");
  EXPECT_EQ(contract->trainable[0].model, "disc");
  EXPECT_EQ(contract->trainable[4].names[0], "gen/l1.lora_a");
  EXPECT_EQ(contract->trainable[4].id, Xxh3("gen/l1.lora_a"));
  EXPECT_EQ(QualifiedName("gen", "w"), "gen/w");
  EXPECT_EQ(QualifiedName("", "w"), "w");
}

std::shared_ptr<torch::nn::Module> TiedModel(bool alias_with_other_shape) {
  auto root = std::make_shared<torch::nn::Module>();
  auto a = std::make_shared<torch::nn::Module>();
  auto b = std::make_shared<torch::nn::Module>();
  torch::Tensor w = torch::randn({4, 4});
  a->register_parameter("w", w);
  b->register_parameter("w", alias_with_other_shape ? w.detach().view({16}) : w);
  b->register_parameter("own", torch::randn({2}));
  root->register_module("a", a);
  root->register_module("b", b);
  return root;
}

TEST(ContractTest, TiedParametersAppearOnceWithAllNames) {
  auto model = TiedModel(false);
  auto contract = BuildContract({{"", model.get()}});
  ASSERT_TRUE(contract.ok()) << contract.status().ToString();
  ASSERT_EQ(contract->trainable.size(), 2u);
  EXPECT_EQ(contract->trainable[0].names, (std::vector<std::string>{"a.w", "b.w"}));
  EXPECT_EQ(contract->trainable[0].id, Xxh3("a.w"));
  EXPECT_EQ(contract->trainable[1].names, (std::vector<std::string>{"b.own"}));
}

TEST(ContractTest, TiedNamesWithDifferentShapesAreInvalid) {
  auto model = TiedModel(true);
  auto contract = BuildContract({{"", model.get()}});
  ASSERT_FALSE(contract.ok());
  EXPECT_EQ(contract.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(contract.status().message().find("`a.w`"), std::string::npos) << contract.status().message();
  EXPECT_NE(contract.status().message().find("`b.w`"), std::string::npos) << contract.status().message();
  EXPECT_NE(contract.status().message().find("[4, 4]"), std::string::npos) << contract.status().message();
  EXPECT_NE(contract.status().message().find("[16]"), std::string::npos) << contract.status().message();
}

TEST(ContractTest, FrozenParameterWithGradientIsInvalidAndNamed) {
  torch::manual_seed(0);
  LoraNet net;
  auto clean = BuildContract({{"", net.ptr().get()}});
  ASSERT_TRUE(clean.ok());
  EXPECT_TRUE(CheckNoFrozenGradients(*clean).ok());
  net->l2->base->bias.mutable_grad() = torch::ones({16});
  auto contract = BuildContract({{"", net.ptr().get()}});
  ASSERT_TRUE(contract.ok());
  Status status = CheckNoFrozenGradients(*contract);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "frozen parameter `l2.base.bias` (requires_grad=false) holds a gradient");
}

TEST(ContractTest, CollectRejectsEmptyKeysAndNulls) {
  TrainingState state;
  state.models[""] = nullptr;
  EXPECT_EQ(CollectModels(state).status().code(), StatusCode::kInvalidArgument);
  TrainingState state2;
  state2.models["g"] = nullptr;
  EXPECT_EQ(CollectModels(state2).status().message(), "TrainingState::models[\"g\"] is null");
  TrainingState state3;
  state3.optimizers[""] = nullptr;
  EXPECT_EQ(CollectOptimizers(state3).status().code(), StatusCode::kInvalidArgument);
}

TEST(ContractTest, BuffersAreCollectedInTheirOwnIdSpace) {
  torch::nn::Sequential seq(torch::nn::Linear(3, 3), torch::nn::BatchNorm1d(3));
  auto contract = BuildContract({{"m", seq.ptr().get()}});
  ASSERT_TRUE(contract.ok());
  std::vector<std::string> buffers;
  for (const auto& entry : contract->buffers) buffers.push_back(entry.names[0]);
  EXPECT_EQ(buffers, (std::vector<std::string>{"m/1.running_mean", "m/1.running_var", "m/1.num_batches_tracked"}));
  EXPECT_EQ(contract->buffers[0].id, Xxh3("m/1.running_mean"));
  EXPECT_EQ(contract->trainable.size(), 4u);
}

}  // namespace
}  // namespace trainsnap::internal
