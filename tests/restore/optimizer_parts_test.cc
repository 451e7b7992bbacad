// ComposeOptimizer: a sharded optimizer's state found by parameter in the
// part (rank) that held it, for a target sharded another way.
#include "restore/optimizer_parts.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace trainsnap::internal {
namespace {

// Two Linear layers: parameters 0.weight, 0.bias, 1.weight, 1.bias.
struct Model {
  Model() {
    net->push_back(torch::nn::Linear(4, 4));
    net->push_back(torch::nn::Linear(4, 2));
    contract = BuildContract({NamedModel{"", net.ptr().get()}}).value();
  }
  torch::Tensor Param(const std::string& name) { return net->named_parameters()[name]; }
  torch::nn::Sequential net;
  Contract contract;
};

// The optimizer manifest of a part holding `params` (with state for those in
// `with_state`) in group 0.
proto::TrainingManifest Part(const std::vector<std::string>& params, const std::vector<std::string>& with_state,
                             const std::string& type = "AdamW", double lr = 0.01) {
  proto::TrainingManifest manifest;
  proto::OptimizerManifest* optimizer = manifest.add_optimizers();
  optimizer->set_type(type);
  proto::ParamGroup* group = optimizer->add_groups();
  group->mutable_options()->set_lr(lr);
  for (const std::string& name : params) group->add_param_ids(ParamId(name));
  for (const std::string& name : with_state) {
    proto::ParamOptimizerState* state = optimizer->add_params();
    state->set_param_id(ParamId(name));
    state->set_step(3);
    state->add_roles("exp_avg");
    state->add_roles("exp_avg_sq");
  }
  return manifest;
}

TEST(OptimizerPartsTest, EachParametersStateComesFromThePartThatHeldIt) {
  Model model;
  const proto::TrainingManifest a = Part({"0.weight", "1.weight"}, {"0.weight", "1.weight"});
  const proto::TrainingManifest b = Part({"0.bias", "1.bias"}, {"0.bias"});  // 1.bias never stepped
  torch::optim::AdamW target(std::vector<torch::Tensor>{model.Param("0.bias"), model.Param("1.weight"),
                                                        model.Param("1.bias")},
                             torch::optim::AdamWOptions(0.5));
  google::protobuf::RepeatedPtrField<proto::ExternalTensor> external;
  Result<proto::OptimizerManifest> composed =
      ComposeOptimizer("", {{"rank-00000", &a}, {"rank-00001", &b}}, target, model.contract, &external);
  ASSERT_TRUE(composed.ok()) << composed.status().ToString();
  EXPECT_EQ(composed->type(), "AdamW");
  ASSERT_EQ(composed->groups_size(), 1);
  EXPECT_EQ(composed->groups(0).options().lr(), 0.01);
  EXPECT_EQ(std::vector<uint64_t>(composed->groups(0).param_ids().begin(), composed->groups(0).param_ids().end()),
            (std::vector<uint64_t>{ParamId("0.bias"), ParamId("1.weight"), ParamId("1.bias")}));
  ASSERT_EQ(composed->params_size(), 2);
  EXPECT_EQ(composed->params(0).param_id(), ParamId("0.bias"));
  EXPECT_EQ(composed->params(1).param_id(), ParamId("1.weight"));
  ASSERT_EQ(external.size(), 4);
  EXPECT_EQ(external[0].id(), ParamId("0.bias"));
  EXPECT_EQ(external[0].role(), "exp_avg");
  EXPECT_EQ(external[0].source(), "rank-00001");
  EXPECT_EQ(external[3].id(), ParamId("1.weight"));
  EXPECT_EQ(external[3].role(), "exp_avg_sq");
  EXPECT_EQ(external[3].source(), "rank-00000");
}

TEST(OptimizerPartsTest, WhatCannotBeComposedIsNamed) {
  Model model;
  const proto::TrainingManifest a = Part({"0.weight"}, {"0.weight"});
  const proto::TrainingManifest b = Part({"0.bias"}, {});
  google::protobuf::RepeatedPtrField<proto::ExternalTensor> external;
  torch::optim::AdamW wants_absent(std::vector<torch::Tensor>{model.Param("1.weight")}, torch::optim::AdamWOptions());
  Result<proto::OptimizerManifest> absent =
      ComposeOptimizer("", {{"rank-00000", &a}, {"rank-00001", &b}}, wants_absent, model.contract, &external);
  EXPECT_EQ(absent.status().code(), StatusCode::kContractMismatch);
  EXPECT_EQ(absent.status().message(), "parameter `1.weight`: in no rank's optimizer of the snapshot");

  const proto::TrainingManifest twice = Part({"0.weight"}, {});
  torch::optim::AdamW one(std::vector<torch::Tensor>{model.Param("0.weight")}, torch::optim::AdamWOptions());
  Result<proto::OptimizerManifest> duplicate =
      ComposeOptimizer("", {{"rank-00000", &a}, {"rank-00001", &twice}}, one, model.contract, &external);
  EXPECT_EQ(duplicate.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(duplicate.status().message(),
            "parameter `0.weight` is in the optimizers of both rank-00000 and rank-00001");

  const proto::TrainingManifest sgd = Part({"0.bias"}, {}, "SGD");
  Result<proto::OptimizerManifest> types =
      ComposeOptimizer("", {{"rank-00000", &a}, {"rank-00001", &sgd}}, one, model.contract, &external);
  EXPECT_EQ(types.status().code(), StatusCode::kContractMismatch);
  EXPECT_EQ(types.status().message(), "the ranks' optimizers are of different types: AdamW and SGD (rank-00001)");

  torch::optim::AdamW two_groups(std::vector<torch::Tensor>{model.Param("0.bias")}, torch::optim::AdamWOptions());
  two_groups.add_param_group(torch::optim::OptimizerParamGroup({model.Param("0.weight")}));
  Result<proto::OptimizerManifest> moved =
      ComposeOptimizer("", {{"rank-00000", &a}, {"rank-00001", &b}}, two_groups, model.contract, &external);
  EXPECT_EQ(moved.status().code(), StatusCode::kContractMismatch);
  EXPECT_EQ(moved.status().message(),
            "parameter `0.weight`: in param group 0 at capture (rank-00000), in group 1 of the target");

  Result<proto::OptimizerManifest> unnamed =
      ComposeOptimizer("other", {{"rank-00000", &a}}, one, model.contract, &external);
  EXPECT_EQ(unnamed.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace trainsnap::internal
