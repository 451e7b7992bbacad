#include "torch/scheduler_state.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace trainsnap::internal {
namespace {

TEST(SchedulerStateTest, StepCountReadsAndWritesTheProtectedMember) {
  torch::Tensor w1 = torch::zeros({2}, torch::requires_grad());
  torch::Tensor w2 = torch::zeros({2}, torch::requires_grad());
  torch::optim::SGD opt1({w1}, torch::optim::SGDOptions(1.0));
  torch::optim::SGD opt2({w2}, torch::optim::SGDOptions(1.0));
  torch::optim::StepLR s1(opt1, /*step_size=*/2, /*gamma=*/0.5);
  torch::optim::StepLR s2(opt2, /*step_size=*/2, /*gamma=*/0.5);
  for (int i = 0; i < 3; ++i) s1.step();
  EXPECT_EQ(SchedulerStepCount(s1), 3u);
  EXPECT_EQ(SchedulerStepCount(s2), 0u);
  SetSchedulerStepCount(s2, 3);
  opt2.param_groups()[0].options().set_lr(opt1.param_groups()[0].options().get_lr());
  EXPECT_EQ(SchedulerStepCount(s2), 3u);
  // Both schedulers now decay at the same steps.
  for (int i = 0; i < 5; ++i) {
    s1.step();
    s2.step();
    EXPECT_EQ(opt1.param_groups()[0].options().get_lr(), opt2.param_groups()[0].options().get_lr()) << i;
  }
  // Decayed at step counts 2, 4 and 6.
  EXPECT_EQ(opt1.param_groups()[0].options().get_lr(), 1.0 / 8);
}

}  // namespace
}  // namespace trainsnap::internal
