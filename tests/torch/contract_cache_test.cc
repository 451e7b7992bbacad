#include "torch/contract_cache.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/training_rig.h"

namespace trainsnap::internal {
namespace {

using capture_test::LoraNet;

// Everything BuildContract produces, compared field by field.
void ExpectSameEntries(const std::vector<ContractEntry>& actual, const std::vector<ContractEntry>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    SCOPED_TRACE(expected[i].names.front());
    EXPECT_EQ(actual[i].id, expected[i].id);
    EXPECT_EQ(actual[i].model, expected[i].model);
    EXPECT_EQ(actual[i].names, expected[i].names);
    EXPECT_EQ(actual[i].impls, expected[i].impls);
    ASSERT_TRUE(actual[i].tensor.defined());
    EXPECT_EQ(actual[i].tensor.unsafeGetTensorImpl(), expected[i].tensor.unsafeGetTensorImpl());
  }
}

void ExpectAsBuiltNow(const Contract& actual, const std::vector<NamedModel>& models) {
  Result<Contract> expected = BuildContract(models);
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  ExpectSameEntries(actual.trainable, expected->trainable);
  ExpectSameEntries(actual.frozen, expected->frozen);
  ExpectSameEntries(actual.buffers, expected->buffers);
  EXPECT_EQ(actual.param_ids, expected->param_ids);
  EXPECT_EQ(actual.trainable_index, expected->trainable_index);
  EXPECT_EQ(actual.frozen_index, expected->frozen_index);
  EXPECT_EQ(actual.buffer_index, expected->buffer_index);
}

// A LoRA net (frozen base, trainable adapters), a BatchNorm (buffers) and a
// tie (one tensor under two names).
struct Models {
  LoraNet lora;
  torch::nn::Sequential norm{torch::nn::Linear(4, 4), torch::nn::BatchNorm1d(4)};
  Models() { norm[0]->register_parameter("tied", lora->l1->lora_a); }
  std::vector<NamedModel> named() { return {{"", lora.ptr().get()}, {"norm", norm.ptr().get()}}; }
};

// Acquires through `cache` and checks the contract against BuildContract's;
// returns whether the cache reused its contract.
bool AcquireAndCheck(ContractCache& cache, const std::vector<NamedModel>& models) {
  Result<ContractCache::Lease> lease = cache.Acquire(models);
  EXPECT_TRUE(lease.ok()) << lease.status().ToString();
  if (!lease.ok()) return false;
  ExpectAsBuiltNow(**lease, models);
  return cache.reused();
}

// Seeded models and a cache that has built their contract and reused it once.
struct Cached {
  Cached() {
    EXPECT_FALSE(AcquireAndCheck(cache, models.named()));
    EXPECT_TRUE(AcquireAndCheck(cache, models.named()));
  }
  int seeded = (torch::manual_seed(0), 0);  // before the models draw their values
  Models models;
  ContractCache cache;
};

TEST(ContractCacheTest, ReusesTheContractWhileTheModelsAreUnchanged) {
  Cached cached;
  Models& models = cached.models;
  ContractCache& cache = cached.cache;
  EXPECT_TRUE(AcquireAndCheck(cache, models.named()));
  // The tie is one entry with both names.
  Result<ContractCache::Lease> lease = cache.Acquire(models.named());
  ASSERT_TRUE(lease.ok());
  const ContractEntry* tied = (*lease)->Trainable(ParamId("l1.lora_a"));
  ASSERT_NE(tied, nullptr);
  EXPECT_EQ(tied->names, (std::vector<std::string>{"l1.lora_a", "norm/0.tied"}));
}

TEST(ContractCacheTest, WithoutACacheTheContractIsBuiltForOneUse) {
  torch::manual_seed(0);
  Models models;
  Result<ContractCache::Lease> lease = ContractCache::Acquire(nullptr, models.named());
  ASSERT_TRUE(lease.ok());
  ExpectAsBuiltNow(**lease, models.named());
}

// The cache never keeps a model's tensors alive between captures.
TEST(ContractCacheTest, ALeaseHoldsTheTensorsOnlyWhileItLives) {
  torch::manual_seed(0);
  Models models;
  const torch::Tensor& weight = models.lora->l2->base->weight;
  const size_t before = weight.use_count();
  ContractCache cache;
  for (int i = 0; i < 2; ++i) {  // built, then reused
    Result<ContractCache::Lease> lease = cache.Acquire(models.named());
    ASSERT_TRUE(lease.ok());
    EXPECT_EQ(weight.use_count(), before + 1);
  }
  EXPECT_EQ(weight.use_count(), before);
  EXPECT_TRUE(cache.reused());
}

TEST(ContractCacheTest, OneLeaseAtATime) {
  torch::manual_seed(0);
  Models models;
  ContractCache cache;
  Result<ContractCache::Lease> first = cache.Acquire(models.named());
  ASSERT_TRUE(first.ok());
  Result<ContractCache::Lease> second = cache.Acquire(models.named());
  EXPECT_EQ(second.status().code(), StatusCode::kBusy);
}

// Each change to something BuildContract reads makes the cache build
// again, and the contract is then what BuildContract returns.
struct Change {
  const char* what;
  std::function<void(Models&)> apply;
};

class ContractCacheChangeTest : public ::testing::TestWithParam<Change> {};

TEST_P(ContractCacheChangeTest, RebuildsAndMatchesBuildContract) {
  Cached cached;
  Models& models = cached.models;
  ContractCache& cache = cached.cache;
  ASSERT_FALSE(::testing::Test::HasFailure());
  {
    torch::NoGradGuard no_grad;
    GetParam().apply(models);
  }
  EXPECT_FALSE(AcquireAndCheck(cache, models.named()));
  EXPECT_TRUE(AcquireAndCheck(cache, models.named()));
}

INSTANTIATE_TEST_SUITE_P(
    Changes, ContractCacheChangeTest,
    ::testing::Values(
        Change{"freeze", [](Models& m) { m.lora->l2->lora_b.set_requires_grad(false); }},
        Change{"unfreeze", [](Models& m) { m.lora->l1->base->bias.set_requires_grad(true); }},
        Change{"new_parameter", [](Models& m) { m.lora->l2->register_parameter("extra", torch::zeros({3})); }},
        Change{"new_module", [](Models& m) { m.lora->register_module("head", torch::nn::Linear(2, 2)); }},
        Change{"replaced_module_same_names",
               [](Models& m) {
                 m.lora->l2 = capture_test::LoraLinear(m.lora->replace_module("l2", capture_test::LoraLinear(16, 16, 4)));
               }},
        Change{"new_buffer", [](Models& m) { m.norm[1]->register_buffer("seen", torch::zeros({1})); }},
        Change{"new_data_same_shape", [](Models& m) { m.lora->l1->lora_b.set_data(torch::zeros({16, 4})); }},
        Change{"new_shape", [](Models& m) { m.lora->l1->lora_b.set_data(torch::zeros({4, 16})); }},
        Change{"new_dtype", [](Models& m) { m.lora->l1->base->weight.set_data(torch::zeros({16, 16}, torch::kDouble)); }},
        // Two parameters come to share storage: a tie BuildContract finds
        // by the first byte.
        Change{"tied_by_storage", [](Models& m) { m.lora->l2->lora_a.set_data(m.lora->l1->lora_a.detach()); }},
        Change{"renamed_path",
               [](Models& m) {
                 auto moved = m.lora->l2;
                 m.lora->unregister_module("l2");
                 m.lora->register_module("l2b", moved);
               }}),
    [](const ::testing::TestParamInfo<Change>& info) { return std::string(info.param.what); });

TEST(ContractCacheTest, OtherModelKeysRebuild) {
  torch::manual_seed(0);
  LoraNet net;
  ContractCache cache;
  EXPECT_FALSE(AcquireAndCheck(cache, {{"a", net.ptr().get()}}));
  EXPECT_FALSE(AcquireAndCheck(cache, {{"b", net.ptr().get()}}));
  EXPECT_FALSE(AcquireAndCheck(cache, {{"a", net.ptr().get()}, {"b", net.ptr().get()}}));
}

// Capturing one set of models and restoring into another keeps both; a
// third evicts the least recently used.
TEST(ContractCacheTest, KeepsTheLastTwoSetsOfModels) {
  torch::manual_seed(0);
  LoraNet trained, evaluated, third;
  const std::vector<NamedModel> a{{"", trained.ptr().get()}}, b{{"", evaluated.ptr().get()}},
      c{{"", third.ptr().get()}};
  ContractCache cache;
  EXPECT_FALSE(AcquireAndCheck(cache, a));
  EXPECT_FALSE(AcquireAndCheck(cache, b));
  EXPECT_TRUE(AcquireAndCheck(cache, a));
  EXPECT_TRUE(AcquireAndCheck(cache, b));
  EXPECT_FALSE(AcquireAndCheck(cache, c));  // evicts a
  EXPECT_TRUE(AcquireAndCheck(cache, b));
  EXPECT_FALSE(AcquireAndCheck(cache, a));
}

// BuildContract's errors come through and nothing is cached for them.
TEST(ContractCacheTest, AnInvalidContractIsRefusedEveryTime) {
  auto root = std::make_shared<torch::nn::Module>();
  torch::Tensor w = torch::randn({2, 2});
  root->register_parameter("w", w);
  root->register_parameter("alias", w.detach(), /*requires_grad=*/false);
  ContractCache cache;
  for (int i = 0; i < 2; ++i) {
    Result<ContractCache::Lease> lease = cache.Acquire({{"", root.get()}});
    EXPECT_EQ(lease.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(lease.status().message(),
              "tied parameters `w` and `alias` disagree: [2, 2] Float trainable vs [2, 2] Float frozen");
  }
}

}  // namespace
}  // namespace trainsnap::internal
