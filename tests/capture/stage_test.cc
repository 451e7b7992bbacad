// Stage, the first step of a capture: what it copies and describes for each
// CheckpointerOptions, on the training thread, before anything is written.
#include "capture/stage.h"

#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/training_rig.h"
#include "torch/manifest_format.h"

namespace trainsnap::internal {
namespace {

using capture_test::BitwiseEqual;
using capture_test::Opt;
using capture_test::Rig;

std::set<std::string> Roles(const StagedSnapshot& staged, const std::string& name) {
  std::set<std::string> roles;
  for (const StagedTensor& tensor : staged.staging.tensors()) {
    if (tensor.name && *tensor.name == name) roles.insert(tensor.role);
  }
  return roles;
}

TEST(StageTest, MidWindowStagesParametersGradientsAndOptimizerStateAsIndependentCopies) {
  Rig rig(Opt::kAdam);
  for (int i = 0; i < 4; ++i) rig.MicroStep();  // one optimizer step, then one micro-step into the window
  ASSERT_EQ(rig.window.micro_step, 1);
  BaseIdentityBuilder base;
  auto staged = Stage(7, rig.State(), CheckpointerOptions(), base);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  const proto::TrainingManifest& manifest = (*staged)->manifest;
  EXPECT_EQ(manifest.format_version(), kManifestFormatVersion);
  EXPECT_EQ(manifest.step(), 7);
  ASSERT_EQ(manifest.params_size(), 4);  // l1/l2 lora_a/lora_b
  for (const proto::ContractParam& param : manifest.params()) EXPECT_EQ(param.grad(), proto::GRAD_STORED);
  EXPECT_EQ(manifest.accumulation().micro_step(), 1);
  EXPECT_EQ(manifest.scheduler().step_count(), 1u);
  ASSERT_EQ(manifest.extra_size(), 1);
  EXPECT_EQ(manifest.extra(0).state(), "4");  // the cursor
  EXPECT_EQ(Roles(**staged, "l1.lora_a"), (std::set<std::string>{"param", "grad", "exp_avg", "exp_avg_sq"}));

  // The staged bytes are the values at Stage, whatever training does next.
  const torch::Tensor before = rig.model->l1->lora_a.detach().clone();
  {
    torch::NoGradGuard no_grad;
    rig.model->l1->lora_a.add_(1.0);
  }
  for (const StagedTensor& tensor : (*staged)->staging.tensors()) {
    if (tensor.name && *tensor.name == "l1.lora_a" && tensor.role == "param") {
      EXPECT_TRUE(BitwiseEqual(tensor.host, before));
    }
  }
}

TEST(StageTest, AtAWindowBoundaryGradientsAreOmittedAndModelStateSelectsTheTensors) {
  Rig rig(Opt::kSgdMomentum);
  for (int i = 0; i < 3; ++i) rig.MicroStep();
  ASSERT_EQ(rig.window.micro_step, 0);
  BaseIdentityBuilder base;
  CheckpointerOptions trainable;
  trainable.model_state = ModelState::kTrainable;
  auto only_trainable = Stage(3, rig.State(), trainable, base);
  ASSERT_TRUE(only_trainable.ok()) << only_trainable.status().ToString();
  const bool grads_defined = rig.model->l1->lora_a.grad().defined();  // zero_grad() may leave them undefined
  for (const proto::ContractParam& param : (*only_trainable)->manifest.params()) {
    EXPECT_EQ(param.grad(), grads_defined ? proto::GRAD_OMITTED : proto::GRAD_UNDEFINED) << param.names(0);
  }
  EXPECT_FALSE(Roles(**only_trainable, "l1.lora_a").count("grad"));
  EXPECT_TRUE(Roles(**only_trainable, "l1.base.weight").empty());
  EXPECT_EQ((*only_trainable)->manifest.model_tensors_size(), 0);

  CheckpointerOptions full;
  full.model_state = ModelState::kFull;
  auto everything = Stage(3, rig.State(), full, base);
  ASSERT_TRUE(everything.ok()) << everything.status().ToString();
  EXPECT_EQ(Roles(**everything, "l1.base.weight"), std::set<std::string>{"param"});
  EXPECT_EQ((*everything)->manifest.model_tensors_size(), 4);  // l1/l2 base weight/bias
  EXPECT_EQ((*everything)->manifest.base().frozen_size(), 4);
}

TEST(StageTest, ANullExtraIsRefusedNamingIt) {
  Rig rig(Opt::kAdam);
  TrainingState state = rig.State();
  state.extra["loader"] = nullptr;
  BaseIdentityBuilder base;
  auto staged = Stage(1, state, CheckpointerOptions(), base);
  EXPECT_EQ(staged.status(), Status::InvalidArgument("extra state `loader` is null"));
}

}  // namespace
}  // namespace trainsnap::internal
