// EstimateStagedBytes: the bytes a capture would stage, found without
// staging: equal to what Stage copies for every optimizer, window position,
// ModelState and Gradients choice (plus the zeroed gradients that Stage reads
// but does not store), and exact for a hand-counted state.
#include "capture/stage_estimate.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "capture/stage.h"
#include "testing/training_rig.h"

// Named, as the test sources are built in unity (shared anonymous namespace).
namespace trainsnap::internal::stage_estimate_test {
namespace {

using capture_test::Opt;
using capture_test::Rig;

uint64_t StagedBytes(const TrainingState& state, const CheckpointerOptions& options) {
  BaseIdentityBuilder base;
  auto staged = Stage(1, state, options, base);
  EXPECT_TRUE(staged.ok()) << staged.status().ToString();
  if (!staged.ok()) return 0;
  return (*staged)->staging.bytes();
}

TEST(StageEstimateTest, EqualsTheBytesStageCopies) {
  for (Opt kind : {Opt::kAdam, Opt::kAdamAmsgrad, Opt::kAdamW, Opt::kSgdMomentum, Opt::kRmsProp, Opt::kAdagrad}) {
    Rig rig(kind);
    // 3 micro-steps: one optimizer step, at a window boundary (no
    // gradients under kAuto); a 4th: mid-window (gradients staged).
    for (int micro_steps : {3, 4}) {
      while (rig.cursor.position < micro_steps) rig.MicroStep();
      for (ModelState model_state : {ModelState::kTrainable, ModelState::kTrainableAndBuffers, ModelState::kFull}) {
        for (Gradients gradients : {Gradients::kAuto, Gradients::kAlways, Gradients::kNever}) {
          CheckpointerOptions options;
          options.model_state = model_state;
          options.gradients = gradients;
          TrainingState state = rig.State();
          state.rng = false;
          ContractCache contracts;
          Result<uint64_t> estimate = EstimateStagedBytes(state, options, &contracts);
          ASSERT_TRUE(estimate.ok()) << estimate.status().ToString();
          // At a boundary the optimizer zeroed the gradients: kAlways reads
          // them but stores none (a zero gradient is recorded, not staged);
          // the estimate counts their bytes.
          uint64_t zeroed = 0;
          if (gradients == Gradients::kAlways && micro_steps == 3) {
            for (const torch::Tensor& param : capture_test::Trainable(*rig.model)) zeroed += param.grad().nbytes();
          }
          EXPECT_EQ(*estimate, StagedBytes(state, options) + zeroed)
              << "optimizer " << static_cast<int>(kind) << ", micro-steps " << micro_steps << ", model_state "
              << static_cast<int>(model_state) << ", gradients " << static_cast<int>(gradients);
          EXPECT_GT(*estimate, 0u);
        }
      }
    }
  }
}

TEST(StageEstimateTest, CountsParametersAndAdamsTwoMomentsExactly) {
  torch::manual_seed(3);
  torch::nn::Linear model(1024, 1024);
  torch::optim::Adam adam(model->parameters());
  model->forward(torch::randn({4, 1024})).sum().backward();
  adam.step();
  for (torch::Tensor& param : model->parameters()) param.mutable_grad() = torch::Tensor();  // none pending
  TrainingState state;
  state.model = model.ptr().get();
  state.optimizer = &adam;
  // weight and bias, fp32, and Adam's exp_avg and exp_avg_sq of each.
  const uint64_t expected = (1024 * 1024 + 1024) * 4 * 3;
  Result<uint64_t> estimate = EstimateStagedBytes(state, CheckpointerOptions(), nullptr);
  ASSERT_TRUE(estimate.ok()) << estimate.status().ToString();
  EXPECT_EQ(*estimate, expected);
}

TEST(StageEstimateTest, RefusesWhatStageRefuses) {
  torch::nn::Linear model(4, 4);
  torch::optim::LBFGS lbfgs(model->parameters());
  TrainingState state;
  state.model = model.ptr().get();
  state.optimizer = &lbfgs;
  Result<uint64_t> estimate = EstimateStagedBytes(state, CheckpointerOptions(), nullptr);
  ASSERT_FALSE(estimate.ok());
  EXPECT_EQ(estimate.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(estimate.status().message().find("LBFGS"), std::string::npos) << estimate.status().ToString();

  state.optimizer = nullptr;
  state.models["teacher"] = nullptr;
  estimate = EstimateStagedBytes(state, CheckpointerOptions(), nullptr);
  ASSERT_FALSE(estimate.ok());
  EXPECT_EQ(estimate.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainsnap::internal::stage_estimate_test
