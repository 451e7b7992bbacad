#include "torch/contract.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <xxhash.h>

#include "testing/training_rig.h"

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

enum class Alias { kSameTensor, kOtherShape, kFrozenAlias };

std::shared_ptr<torch::nn::Module> TiedModel(Alias alias = Alias::kSameTensor) {
  auto root = std::make_shared<torch::nn::Module>();
  auto a = std::make_shared<torch::nn::Module>();
  auto b = std::make_shared<torch::nn::Module>();
  torch::Tensor w = torch::randn({4, 4});
  a->register_parameter("w", w);
  switch (alias) {
    case Alias::kSameTensor: b->register_parameter("w", w); break;
    case Alias::kOtherShape: b->register_parameter("w", w.detach().view({16})); break;
    case Alias::kFrozenAlias: b->register_parameter("w", w.detach(), /*requires_grad=*/false); break;
  }
  b->register_parameter("own", torch::randn({2}));
  root->register_module("a", a);
  root->register_module("b", b);
  return root;
}

TEST(ContractTest, TiedParametersAppearOnceWithAllNames) {
  auto model = TiedModel();
  auto contract = BuildContract({{"", model.get()}});
  ASSERT_TRUE(contract.ok()) << contract.status().ToString();
  ASSERT_EQ(contract->trainable.size(), 2u);
  EXPECT_EQ(contract->trainable[0].names, (std::vector<std::string>{"a.w", "b.w"}));
  EXPECT_EQ(contract->trainable[0].id, Xxh3("a.w"));
  EXPECT_EQ(contract->trainable[1].names, (std::vector<std::string>{"b.own"}));
}

// A view at storage offset 0 with another shape is not a tie (it was
// reported as "tied parameters disagree"): an entry of its own.
TEST(ContractTest, ViewAtStorageOffsetZeroIsAnEntryOfItsOwn) {
  auto model = TiedModel(Alias::kOtherShape);
  auto contract = BuildContract({{"", model.get()}});
  ASSERT_TRUE(contract.ok()) << contract.status().ToString();
  ASSERT_EQ(contract->trainable.size(), 3u);
  EXPECT_EQ(contract->trainable[0].names, (std::vector<std::string>{"a.w"}));
  EXPECT_EQ(contract->trainable[1].names, (std::vector<std::string>{"b.w"}));
  EXPECT_EQ(contract->trainable[1].tensor.sizes(), (std::vector<int64_t>{16}));
  EXPECT_EQ(contract->trainable[1].tensor.data_ptr(), contract->trainable[0].tensor.data_ptr());
  EXPECT_EQ(contract->Trainable(Xxh3("b.w")), &contract->trainable[1]);
  EXPECT_EQ(contract->Param(Xxh3("a.w")), &contract->trainable[0]);
  EXPECT_EQ(contract->Frozen(Xxh3("a.w")), nullptr);
}

TEST(ContractTest, TiedNamesThatDisagreeOnRequiresGradAreInvalid) {
  auto model = TiedModel(Alias::kFrozenAlias);
  auto contract = BuildContract({{"", model.get()}});
  ASSERT_FALSE(contract.ok());
  EXPECT_EQ(contract.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(contract.status().message(),
            "tied parameters `a.w` and `b.w` disagree: [4, 4] Float trainable vs [4, 4] Float frozen");
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
