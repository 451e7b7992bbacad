#include "capture/optimizer_state.h"
#include "torch/optimizer_traits.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/training_rig.h"

namespace trainsnap::internal {
namespace {

using capture_test::BitwiseEqual;
using capture_test::LoraNet;
using capture_test::Trainable;

class OptimizerStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(0);
    net_ = LoraNet();
    auto contract = BuildContract({{"", net_.ptr().get()}});
    ASSERT_TRUE(contract.ok());
    contract_ = std::move(contract).value();
  }
  void Step(torch::optim::Optimizer& optimizer) {
    torch::mse_loss(net_->forward(torch::randn({4, 16})), torch::randn({4, 16})).backward();
    optimizer.step();
  }
  LoraNet net_{nullptr};
  Contract contract_;
};

TEST_F(OptimizerStateTest, AdamAmsgradStateAndOptionsByParameterId) {
  torch::optim::Adam adam(Trainable(*net_), torch::optim::AdamOptions(0.01).betas({0.8, 0.95}).eps(1e-6)
                                                .weight_decay(0.1).amsgrad(true));
  Step(adam);
  Step(adam);
  StagingArea staging;
  proto::OptimizerManifest out;
  ASSERT_TRUE(CaptureOptimizer({"", &adam}, contract_, staging, &out).ok());
  EXPECT_EQ(out.type(), "Adam");
  EXPECT_EQ(out.role_prefix(), "");
  ASSERT_EQ(out.groups_size(), 1);
  const proto::GroupOptions& o = out.groups(0).options();
  EXPECT_EQ(o.lr(), 0.01);
  EXPECT_EQ(o.beta1(), 0.8);
  EXPECT_EQ(o.beta2(), 0.95);
  EXPECT_EQ(o.eps(), 1e-6);
  EXPECT_EQ(o.weight_decay(), 0.1);
  EXPECT_TRUE(o.amsgrad());
  ASSERT_EQ(out.groups(0).param_ids_size(), 4);
  EXPECT_EQ(out.groups(0).param_ids(0), ParamId("l1.lora_a"));
  ASSERT_EQ(out.params_size(), 4);
  EXPECT_EQ(out.params(0).param_id(), ParamId("l1.lora_a"));
  EXPECT_EQ(out.params(0).step(), 2);
  EXPECT_EQ(std::vector<std::string>(out.params(0).roles().begin(), out.params(0).roles().end()),
            (std::vector<std::string>{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}));
  ASSERT_EQ(staging.tensors().size(), 12u);
  const auto& state = static_cast<torch::optim::AdamParamState&>(
      *adam.state().at(OptimizerStateKey(net_->l1->lora_a)));
  EXPECT_EQ(staging.tensors()[0].param_id, ParamId("l1.lora_a"));
  EXPECT_EQ(staging.tensors()[0].role, "exp_avg");
  EXPECT_TRUE(BitwiseEqual(staging.tensors()[0].host, state.exp_avg()));
  EXPECT_TRUE(BitwiseEqual(staging.tensors()[2].host, state.max_exp_avg_sq()));
}

TEST_F(OptimizerStateTest, GroupsAndNamedOptimizerRolePrefix) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{net_->l1->lora_a, net_->l1->lora_b},
                      std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.1).momentum(0.9)));
  groups.emplace_back(std::vector<torch::Tensor>{net_->l2->lora_a, net_->l2->lora_b},
                      std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.2).nesterov(true).momentum(0.5)));
  torch::optim::SGD sgd(std::move(groups), torch::optim::SGDOptions(0.3));
  Step(sgd);
  StagingArea staging;
  proto::OptimizerManifest out;
  ASSERT_TRUE(CaptureOptimizer({"D", &sgd}, contract_, staging, &out).ok());
  EXPECT_EQ(out.name(), "D");
  EXPECT_EQ(out.type(), "SGD");
  ASSERT_EQ(out.groups_size(), 2);
  EXPECT_EQ(out.groups(0).options().lr(), 0.1);
  EXPECT_EQ(out.groups(1).options().lr(), 0.2);
  EXPECT_TRUE(out.groups(1).options().nesterov());
  EXPECT_EQ(out.groups(1).param_ids(0), ParamId("l2.lora_a"));
  ASSERT_EQ(staging.tensors().size(), 4u);
  EXPECT_EQ(staging.tensors()[0].role, "D:momentum_buffer");
}

TEST_F(OptimizerStateTest, LbfgsIsNotSupported) {
  torch::optim::LBFGS lbfgs(Trainable(*net_), torch::optim::LBFGSOptions(1.0));
  StagingArea staging;
  proto::OptimizerManifest out;
  Status status = CaptureOptimizer({"", &lbfgs}, contract_, staging, &out);
  EXPECT_EQ(status.code(), StatusCode::kNotSupported);
  EXPECT_NE(status.message().find("LBFGS"), std::string::npos) << status.message();
}

class HomeMadeOptimizer : public torch::optim::Optimizer {
 public:
  explicit HomeMadeOptimizer(std::vector<torch::Tensor> params)
      : Optimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                  std::make_unique<torch::optim::SGDOptions>(0.1)) {}
  torch::Tensor step(LossClosure) override { return {}; }
};

TEST_F(OptimizerStateTest, UnknownOptimizerIsNotSupportedByName) {
  HomeMadeOptimizer optimizer(Trainable(*net_));
  StagingArea staging;
  proto::OptimizerManifest out;
  Status status = CaptureOptimizer({"", &optimizer}, contract_, staging, &out);
  EXPECT_EQ(status.code(), StatusCode::kNotSupported);
  EXPECT_NE(status.message().find("HomeMadeOptimizer"), std::string::npos) << status.message();
}

TEST_F(OptimizerStateTest, TensorOutsideTheModelsIsInvalid) {
  torch::Tensor stray = torch::zeros({3, 2}, torch::requires_grad());
  torch::optim::Adagrad adagrad({net_->l1->lora_a, stray});
  StagingArea staging;
  proto::OptimizerManifest out;
  Status status = CaptureOptimizer({"", &adagrad}, contract_, staging, &out);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "optimizer: param group 0 holds a tensor of shape [3, 2] that is no parameter of the captured models");
}

TEST_F(OptimizerStateTest, RmspropAndAdagradStepsAndRoles) {
  torch::optim::RMSprop rmsprop(Trainable(*net_), torch::optim::RMSpropOptions(0.01).centered(true).momentum(0.3));
  Step(rmsprop);
  StagingArea staging;
  proto::OptimizerManifest out;
  ASSERT_TRUE(CaptureOptimizer({"", &rmsprop}, contract_, staging, &out).ok());
  EXPECT_EQ(out.params(0).step(), 1);
  EXPECT_EQ(std::vector<std::string>(out.params(0).roles().begin(), out.params(0).roles().end()),
            (std::vector<std::string>{"square_avg", "momentum_buffer", "grad_avg"}));
  EXPECT_TRUE(out.groups(0).options().centered());
  EXPECT_EQ(out.groups(0).options().momentum(), 0.3);

  // Adagrad creates its state in the constructor, before any step.
  torch::optim::Adagrad adagrad(Trainable(*net_), torch::optim::AdagradOptions(0.1).initial_accumulator_value(0.5));
  StagingArea staging2;
  proto::OptimizerManifest out2;
  ASSERT_TRUE(CaptureOptimizer({"", &adagrad}, contract_, staging2, &out2).ok());
  ASSERT_EQ(out2.params_size(), 4);
  EXPECT_EQ(out2.params(0).step(), 0);
  EXPECT_EQ(out2.groups(0).options().initial_accumulator_value(), 0.5);
  EXPECT_TRUE(BitwiseEqual(staging2.tensors()[0].host, torch::full({4, 16}, 0.5)));
}

}  // namespace
}  // namespace trainsnap::internal
