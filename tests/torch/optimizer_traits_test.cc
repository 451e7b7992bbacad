#include "torch/optimizer_traits.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace trainsnap::internal {
namespace {

using proto::GroupOptions;

// Every field of the manifest's GroupOptions, by name, so that a test states
// the whole message: the options an optimizer lacks must stay 0.
std::vector<std::pair<std::string, double>> GroupOptionFields(const GroupOptions& p) {
  return {{"lr", p.lr()},
          {"beta1", p.beta1()},
          {"beta2", p.beta2()},
          {"eps", p.eps()},
          {"weight_decay", p.weight_decay()},
          {"amsgrad", p.amsgrad() ? 1.0 : 0.0},
          {"momentum", p.momentum()},
          {"dampening", p.dampening()},
          {"nesterov", p.nesterov() ? 1.0 : 0.0},
          {"alpha", p.alpha()},
          {"centered", p.centered() ? 1.0 : 0.0},
          {"lr_decay", p.lr_decay()},
          {"initial_accumulator_value", p.initial_accumulator_value()}};
}

// `want` lists the non-zero fields; every other field must be 0.
void ExpectGroupOptions(const GroupOptions& saved, const std::map<std::string, double>& want) {
  for (const auto& [name, value] : GroupOptionFields(saved)) {
    auto it = want.find(name);
    EXPECT_EQ(value, it == want.end() ? 0.0 : it->second) << name;
  }
}

// Saves `options`, loads the result into default options and saves those
// again: both saves must be the same message.
template <class Traits>
GroupOptions SaveAndReloadOptions(const typename Traits::Options& options) {
  GroupOptions saved;
  Traits::SaveOptions(options, &saved);
  typename Traits::Options loaded(99.0);  // every other field at LibTorch's default
  Traits::LoadOptions(saved, loaded);
  GroupOptions again;
  Traits::SaveOptions(loaded, &again);
  EXPECT_EQ(again.SerializeAsString(), saved.SerializeAsString());
  return saved;
}

TEST(OptimizerTraitsTest, AdamAndAdamWMapLrBetasEpsWeightDecayAmsgrad) {
  const GroupOptions adam = SaveAndReloadOptions<AdamTraits>(
      torch::optim::AdamOptions(0.5).betas({0.25, 0.125}).eps(3.0).weight_decay(4.0).amsgrad(true));
  ExpectGroupOptions(adam, {{"lr", 0.5}, {"beta1", 0.25}, {"beta2", 0.125}, {"eps", 3.0}, {"weight_decay", 4.0},
                      {"amsgrad", 1.0}});
  const GroupOptions adamw = SaveAndReloadOptions<AdamWTraits>(
      torch::optim::AdamWOptions(0.5).betas({0.25, 0.125}).eps(3.0).weight_decay(4.0).amsgrad(true));
  EXPECT_EQ(adamw.SerializeAsString(), adam.SerializeAsString());
}

TEST(OptimizerTraitsTest, SgdMapsLrMomentumDampeningWeightDecayNesterov) {
  const GroupOptions sgd = SaveAndReloadOptions<SGDTraits>(
      torch::optim::SGDOptions(0.5).momentum(2.0).dampening(3.0).weight_decay(4.0).nesterov(true));
  ExpectGroupOptions(sgd, {{"lr", 0.5}, {"momentum", 2.0}, {"dampening", 3.0}, {"weight_decay", 4.0}, {"nesterov", 1.0}});
}

TEST(OptimizerTraitsTest, RmspropMapsLrAlphaEpsWeightDecayMomentumCentered) {
  const GroupOptions rmsprop = SaveAndReloadOptions<RMSpropTraits>(
      torch::optim::RMSpropOptions(0.5).alpha(2.0).eps(3.0).weight_decay(4.0).momentum(5.0).centered(true));
  ExpectGroupOptions(rmsprop, {{"lr", 0.5}, {"alpha", 2.0}, {"eps", 3.0}, {"weight_decay", 4.0}, {"momentum", 5.0},
                         {"centered", 1.0}});
}

TEST(OptimizerTraitsTest, AdagradMapsLrLrDecayWeightDecayInitialAccumulatorEps) {
  const GroupOptions adagrad = SaveAndReloadOptions<AdagradTraits>(
      torch::optim::AdagradOptions(0.5).lr_decay(2.0).weight_decay(4.0).initial_accumulator_value(6.0).eps(3.0));
  ExpectGroupOptions(adagrad, {{"lr", 0.5}, {"lr_decay", 2.0}, {"weight_decay", 4.0}, {"initial_accumulator_value", 6.0},
                         {"eps", 3.0}});
}

TEST(OptimizerTraitsTest, StateTensorsInCaptureOrderAndSetByRole) {
  torch::optim::RMSpropParamState state;
  const torch::Tensor square_avg = torch::ones({2}), grad_avg = torch::full({2}, 3.0);
  ASSERT_TRUE(RMSpropTraits::SetTensor(state, "square_avg", square_avg));
  ASSERT_TRUE(RMSpropTraits::SetTensor(state, "grad_avg", grad_avg));
  EXPECT_FALSE(RMSpropTraits::SetTensor(state, "exp_avg", square_avg));  // an Adam role
  // SetTensor stores the tensor itself, as the state's setter does.
  EXPECT_TRUE(state.square_avg().is_same(square_avg));
  EXPECT_TRUE(state.grad_avg().is_same(grad_avg));
  const NamedStateTensors tensors = RMSpropTraits::Tensors(state);
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0].first, "square_avg");
  EXPECT_TRUE(tensors[0].second.is_same(square_avg));
  EXPECT_EQ(tensors[1].first, "momentum_buffer");
  EXPECT_FALSE(tensors[1].second.defined());
  EXPECT_EQ(tensors[2].first, "grad_avg");
  EXPECT_TRUE(tensors[2].second.is_same(grad_avg));

  torch::optim::AdamParamState adam;
  AdamTraits::SetStep(adam, 7);
  EXPECT_EQ(AdamTraits::Step(adam), 7);
  torch::optim::SGDParamState sgd;
  SGDTraits::SetStep(sgd, 7);
  EXPECT_EQ(SGDTraits::Step(sgd), 0);  // SGD keeps no step count
  const NamedStateTensors adam_tensors = AdamTraits::Tensors(adam);
  ASSERT_EQ(adam_tensors.size(), 3u);
  EXPECT_EQ(adam_tensors[2].first, "max_exp_avg_sq");
}

// The key must be exactly the one torch/optim/*.cpp build (an ostream's
// rendering of the TensorImpl address), or every state look-up misses.
TEST(OptimizerTraitsTest, StateKeyIsTheOneLibTorchBuilds) {
  std::vector<torch::Tensor> params;
  for (int i = 0; i < 8; ++i) params.push_back(torch::randn({3}, torch::requires_grad()));
  for (const torch::Tensor& p : params) {
    EXPECT_EQ(OptimizerStateKey(p), c10::guts::to_string(p.unsafeGetTensorImpl()));
  }
  torch::optim::Adam adam(params, torch::optim::AdamOptions(0.1));
  for (torch::Tensor& p : params) p.mutable_grad() = torch::ones({3});
  adam.step();
  ASSERT_EQ(adam.state().size(), params.size());
  for (const torch::Tensor& p : params) EXPECT_EQ(adam.state().count(OptimizerStateKey(p)), 1u);
}

}  // namespace
}  // namespace trainsnap::internal
