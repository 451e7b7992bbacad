// Round trips through a real store: every optimizer's state, mid-window and
// at window boundaries, tied parameters, several models and optimizers; the
// restored objects then train on bit-identically.
#include "restore/restore_snapshot.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/training_rig.h"
#include "trainsnap/checkpointer.h"

namespace trainsnap {
namespace {

using capture_test::Fingerprint;
using capture_test::FirstDifference;
using capture_test::LoraNet;
using capture_test::Opt;
using capture_test::Rig;
using capture_test::TempStore;
using capture_test::Trainable;

// Runs `micro_steps` on `rig` starting from the CPU generator state `rng`.
std::map<std::string, torch::Tensor> Continue(Rig& rig, const torch::Tensor& rng, int micro_steps) {
  capture_test::SetCpuRngState(rng);
  for (int i = 0; i < micro_steps; ++i) rig.MicroStep();
  return Fingerprint(rig.State());
}

class RoundTripTest : public ::testing::TestWithParam<Opt> {};

TEST_P(RoundTripTest, MidWindowSnapshotRestoresBitwiseAndTrainsOnIdentically) {
  TempStore ts;
  Rig reference(GetParam());
  for (int i = 0; i < 7; ++i) reference.MicroStep();  // two windows and one micro-step
  ASSERT_EQ(reference.window.micro_step, 1);
  Checkpointer writer(*ts.store);
  ASSERT_TRUE(writer.Capture(7, reference.State()).ok());
  const auto expected = Fingerprint(reference.State());
  const torch::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();

  // A second process's objects: same architecture and base, different history.
  Rig resumed(GetParam());
  for (int i = 0; i < 4; ++i) resumed.MicroStep();
  torch::manual_seed(777);
  ASSERT_NE(FirstDifference(expected, Fingerprint(resumed.State())), "");
  Checkpointer reader(*ts.store);
  Result<int64_t> restored = reader.RestoreLatest(resumed.State());
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(*restored, 7);
  EXPECT_EQ(FirstDifference(expected, Fingerprint(resumed.State())), "");

  // Both go on for two more windows and a bit: identical bit for bit.
  auto reference_after = Continue(reference, rng, 8);
  auto resumed_after = Continue(resumed, rng, 8);
  EXPECT_EQ(FirstDifference(reference_after, resumed_after), "");
}

TEST_P(RoundTripTest, WindowBoundarySnapshotRestoresZeroedGradients) {
  TempStore ts;
  Rig reference(GetParam());
  for (int i = 0; i < 6; ++i) reference.MicroStep();
  ASSERT_EQ(reference.window.micro_step, 0);
  ASSERT_TRUE(reference.model->l1->lora_a.grad().defined());  // zero_grad() keeps zero-filled grads
  Checkpointer writer(*ts.store);
  ASSERT_TRUE(writer.Capture(6, reference.State()).ok());
  const auto expected = Fingerprint(reference.State());
  const torch::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();

  Rig resumed(GetParam());  // never ran backward: every gradient undefined
  ASSERT_FALSE(resumed.model->l1->lora_a.grad().defined());
  Status status = Checkpointer(*ts.store).Restore(6, resumed.State());
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(FirstDifference(expected, Fingerprint(resumed.State())), "");
  EXPECT_EQ(FirstDifference(Continue(reference, rng, 5), Continue(resumed, rng, 5)), "");
}

std::string OptName(const ::testing::TestParamInfo<Opt>& info) {
  static const char* const kNames[] = {"Adam", "AdamAmsgrad", "AdamW", "SgdMomentum", "RmsProp", "Adagrad"};
  return kNames[static_cast<int>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(Optimizers, RoundTripTest,
                         ::testing::Values(Opt::kAdam, Opt::kAdamAmsgrad, Opt::kAdamW, Opt::kSgdMomentum,
                                           Opt::kRmsProp, Opt::kAdagrad),
                         OptName);

TEST(RestoreSnapshotTest, UndefinedGradientsStayUndefined) {
  TempStore ts;
  Rig fresh(Opt::kAdam);  // no backward yet
  ASSERT_TRUE(Checkpointer(*ts.store).Capture(0, fresh.State()).ok());
  Rig trained(Opt::kAdam);
  trained.MicroStep();
  ASSERT_TRUE(trained.model->l2->lora_b.grad().defined());
  ASSERT_TRUE(Checkpointer(*ts.store).Restore(0, trained.State()).ok());
  for (const auto& p : Trainable(*trained.model)) EXPECT_FALSE(p.grad().defined());
  EXPECT_EQ(trained.optimizer->state().size(), 0u);
}

TEST(RestoreSnapshotTest, RestoreGradientsFalseLeavesGradientsAlone) {
  TempStore ts;
  Rig a(Opt::kAdam);
  a.MicroStep();
  ASSERT_TRUE(Checkpointer(*ts.store).Capture(1, a.State()).ok());
  Rig b(Opt::kAdam);
  b.MicroStep();
  b.MicroStep();
  torch::Tensor grad_before = b.model->l1->lora_a.grad().clone();
  RestoreOptions options;
  options.restore_gradients = false;
  ASSERT_TRUE(Checkpointer(*ts.store).Restore(1, b.State(), options).ok());
  EXPECT_TRUE(capture_test::BitwiseEqual(b.model->l1->lora_a.grad(), grad_before));
  EXPECT_TRUE(capture_test::BitwiseEqual(b.model->l1->lora_a, a.model->l1->lora_a));
}

std::shared_ptr<torch::nn::Module> TiedModel() {
  auto root = std::make_shared<torch::nn::Module>();
  auto enc = std::make_shared<torch::nn::Module>();
  auto dec = std::make_shared<torch::nn::Module>();
  torch::Tensor w = torch::randn({6, 6});
  enc->register_parameter("w", w);
  dec->register_parameter("w", w);
  dec->register_parameter("b", torch::randn({6}));
  root->register_module("enc", enc);
  root->register_module("dec", dec);
  return root;
}

void TiedStep(torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  auto params = model.named_parameters();
  torch::Tensor x = torch::randn({3, 6});
  torch::Tensor y = torch::matmul(torch::matmul(x, params["enc.w"]), params["dec.w"].t()) + params["dec.b"];
  y.pow(2).mean().backward();
  optimizer.step();
}

TEST(RestoreSnapshotTest, TiedParametersRoundTrip) {
  TempStore ts;
  torch::manual_seed(1);
  auto model = TiedModel();
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  TiedStep(*model, adam);
  TrainingState state;
  state.model = model.get();
  state.optimizer = &adam;
  ASSERT_TRUE(Checkpointer(*ts.store).Capture(1, state).ok());
  auto info = ts.store->Info(1);
  ASSERT_TRUE(info.ok());
  // The tied tensor is stored once: w + b, their grads, exp_avg and exp_avg_sq.
  EXPECT_EQ(info->logical_bytes, 4u * (36 + 6) * 4);

  torch::manual_seed(2);
  auto other = TiedModel();
  torch::optim::Adam other_adam(other->parameters(), torch::optim::AdamOptions(0.5));
  TrainingState target;
  target.model = other.get();
  target.optimizer = &other_adam;
  Status status = Checkpointer(*ts.store).Restore(1, target);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(FirstDifference(Fingerprint(state), Fingerprint(target)), "");
}

// A GAN-style loop: two models, each with its own optimizer, one snapshot.
struct Gan {
  explicit Gan(uint64_t seed) {
    torch::manual_seed(seed);
    gen = torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 6));
    disc = torch::nn::Sequential(torch::nn::Linear(6, 8), torch::nn::ReLU(), torch::nn::Linear(8, 1));
    gen_opt = std::make_unique<torch::optim::Adam>(gen->parameters(), torch::optim::AdamOptions(2e-3).betas({0.5, 0.999}));
    disc_opt = std::make_unique<torch::optim::SGD>(disc->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  }
  TrainingState State() {
    TrainingState state;
    state.models = {{"gen", gen.ptr().get()}, {"disc", disc.ptr().get()}};
    state.optimizers = {{"gen", gen_opt.get()}, {"disc", disc_opt.get()}};
    return state;
  }
  void Step() {
    torch::Tensor real = torch::randn({5, 6}) + 1.0;
    torch::Tensor noise = torch::randn({5, 4});
    disc_opt->zero_grad();
    torch::Tensor fake = gen->forward(noise);
    torch::Tensor d_loss = torch::softplus(-disc->forward(real)).mean() + torch::softplus(disc->forward(fake.detach())).mean();
    d_loss.backward();
    disc_opt->step();
    gen_opt->zero_grad();
    torch::softplus(-disc->forward(fake)).mean().backward();
    gen_opt->step();
  }
  torch::nn::Sequential gen{nullptr}, disc{nullptr};
  std::unique_ptr<torch::optim::Adam> gen_opt;
  std::unique_ptr<torch::optim::SGD> disc_opt;
};

TEST(RestoreSnapshotTest, TwoModelsTwoOptimizersResumeBitExactly) {
  TempStore ts;
  Gan reference(1);
  for (int i = 0; i < 3; ++i) reference.Step();
  ASSERT_TRUE(Checkpointer(*ts.store).Capture(3, reference.State()).ok());
  const torch::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
  const auto expected = Fingerprint(reference.State());

  Gan resumed(2);
  resumed.Step();
  Status status = Checkpointer(*ts.store).Restore(3, resumed.State());
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(FirstDifference(expected, Fingerprint(resumed.State())), "");

  capture_test::SetCpuRngState(rng);
  for (int i = 0; i < 4; ++i) reference.Step();
  auto reference_after = Fingerprint(reference.State());
  capture_test::SetCpuRngState(rng);
  for (int i = 0; i < 4; ++i) resumed.Step();
  EXPECT_EQ(FirstDifference(reference_after, Fingerprint(resumed.State())), "");
}

TEST(RestoreSnapshotTest, ParamGroupOptionsAndSchedulerComeBack) {
  TempStore ts;
  Rig reference(Opt::kAdamW);
  for (int i = 0; i < 9; ++i) reference.MicroStep();  // StepLR halved the lr once
  EXPECT_EQ(reference.optimizer->param_groups()[0].options().get_lr(), 5e-3);
  ASSERT_TRUE(Checkpointer(*ts.store).Capture(9, reference.State()).ok());
  Rig resumed(Opt::kAdamW);
  ASSERT_TRUE(Checkpointer(*ts.store).Restore(9, resumed.State()).ok());
  EXPECT_EQ(resumed.optimizer->param_groups()[0].options().get_lr(), 5e-3);
  EXPECT_EQ(internal::SchedulerStepCount(*resumed.scheduler), 3u);
  EXPECT_EQ(resumed.cursor.position, 9);
  EXPECT_EQ(resumed.window.micro_step, 0);
}

// RestoreOptions::restore_optimizer_options: by default the snapshot's
// hyperparameters replace the caller's; when false the caller's stay and
// only the per-parameter state comes back.
TEST(RestoreSnapshotTest, OptimizerHyperparametersAreTheSnapshotsUnlessKept) {
  TempStore ts;
  Rig reference(Opt::kAdamW);  // lr 1e-2, weight decay 0.05
  for (int i = 0; i < 4; ++i) reference.MicroStep();
  ASSERT_TRUE(Checkpointer(*ts.store).Capture(4, reference.State()).ok());
  const auto expected = Fingerprint(reference.State());
  auto make_target = [] {
    auto rig = std::make_unique<Rig>(Opt::kAdamW);
    auto& options = static_cast<torch::optim::AdamWOptions&>(rig->optimizer->param_groups()[0].options());
    options.lr(0.25).weight_decay(0.5).betas({0.8, 0.95}).eps(1e-6);
    return rig;
  };
  auto target = make_target();
  ASSERT_TRUE(Checkpointer(*ts.store).Restore(4, target->State()).ok());
  EXPECT_EQ(FirstDifference(expected, Fingerprint(target->State())), "");
  auto& restored = static_cast<torch::optim::AdamWOptions&>(target->optimizer->param_groups()[0].options());
  EXPECT_EQ(restored.lr(), 1e-2);
  EXPECT_EQ(restored.weight_decay(), 0.05);

  auto kept = make_target();
  RestoreOptions keep;
  keep.restore_optimizer_options = false;
  ASSERT_TRUE(Checkpointer(*ts.store).Restore(4, kept->State(), keep).ok());
  auto& options = static_cast<torch::optim::AdamWOptions&>(kept->optimizer->param_groups()[0].options());
  EXPECT_EQ(options.lr(), 0.25);
  EXPECT_EQ(options.weight_decay(), 0.5);
  EXPECT_EQ(options.betas(), std::make_tuple(0.8, 0.95));
  EXPECT_EQ(options.eps(), 1e-6);
  // Everything else is the snapshot's: only the group options differ.
  auto actual = Fingerprint(kept->State());
  EXPECT_NE(FirstDifference(expected, actual), "");
  actual.erase("opt/group0#lr");
  actual.erase("opt/group0#opts");
  auto expected_rest = expected;
  expected_rest.erase("opt/group0#lr");
  expected_rest.erase("opt/group0#opts");
  EXPECT_EQ(FirstDifference(expected_rest, actual), "");
}

// Kept options that need state the snapshot lacks (amsgrad without
// max_exp_avg_sq) would make the next step() throw: refused, nothing changed.
TEST(RestoreSnapshotTest, KeptOptionsNeedingAbsentStateAreAContractMismatch) {
  TempStore ts;
  Rig reference(Opt::kAdam);  // amsgrad off
  for (int i = 0; i < 3; ++i) reference.MicroStep();
  ASSERT_TRUE(Checkpointer(*ts.store).Capture(3, reference.State()).ok());
  Rig target(Opt::kAdamAmsgrad);
  for (int i = 0; i < 3; ++i) target.MicroStep();
  const auto before = Fingerprint(target.State());
  RestoreOptions keep;
  keep.restore_optimizer_options = false;
  Status status = Checkpointer(*ts.store).Restore(3, target.State(), keep);
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(status.message(),
            "restore step 3: optimizer: parameter `l1.lora_a`: the target's Adam options need state "
            "max_exp_avg_sq, which the snapshot lacks; restore the snapshot's options "
            "(RestoreOptions::restore_optimizer_options)");
  EXPECT_EQ(FirstDifference(before, Fingerprint(target.State())), "");
  // With the snapshot's options (amsgrad off again) the same restore succeeds.
  ASSERT_TRUE(Checkpointer(*ts.store).Restore(3, target.State()).ok());
}

// A view of another parameter at storage offset 0 is a parameter of its own,
// not a tie that disagrees: captured and restored like any other.
TEST(RestoreSnapshotTest, ViewAtStorageOffsetZeroRoundTrips) {
  auto make = [](uint64_t seed) {
    torch::manual_seed(seed);
    auto model = std::make_shared<torch::nn::Module>();
    torch::Tensor w = model->register_parameter("w", torch::randn({4, 4}));
    model->register_parameter("row0", w.detach()[0], /*requires_grad=*/false);
    return model;
  };
  TempStore ts;
  auto source = make(1);
  CheckpointerOptions full;
  full.model_state = ModelState::kFull;
  TrainingState state;
  state.model = source.get();
  state.rng = false;
  Status captured = Checkpointer(*ts.store, full).Capture(1, state);
  ASSERT_TRUE(captured.ok()) << captured.ToString();
  auto target = make(2);
  TrainingState target_state;
  target_state.model = target.get();
  target_state.rng = false;
  Status restored = Checkpointer(*ts.store, full).Restore(1, target_state);
  ASSERT_TRUE(restored.ok()) << restored.ToString();
  EXPECT_EQ(FirstDifference(Fingerprint(state), Fingerprint(target_state)), "");
}

// The two phases: PrepareRestore writes no tensor but loads the extras;
// Abandon gives them their previous state back, Apply writes the rest.
class TwoPhaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Rig reference(Opt::kAdamW);
    for (int i = 0; i < 7; ++i) reference.MicroStep();
    ASSERT_TRUE(Checkpointer(*ts_.store).Capture(7, reference.State()).ok());
    expected_ = Fingerprint(reference.State());
    for (int i = 0; i < 4; ++i) target_.MicroStep();
    before_ = Fingerprint(target_.State());
  }
  Result<std::unique_ptr<internal::PreparedRestore>> Prepare() {
    return internal::PrepareRestore(*ts_.store, 7, target_.State(), RestoreOptions{}, "", base_, nullptr);
  }
  TempStore ts_;
  Rig target_{Opt::kAdamW};
  internal::BaseIdentityBuilder base_;
  std::map<std::string, torch::Tensor> expected_, before_;
};

TEST_F(TwoPhaseTest, PrepareLoadsOnlyTheExtrasAndAbandonGivesThemBack) {
  auto prepared = Prepare();
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  EXPECT_EQ(target_.cursor.position, 7);  // the extra state accepted its bytes
  auto after_prepare = Fingerprint(target_.State());
  after_prepare.erase("extra#cursor");
  auto unchanged = before_;
  unchanged.erase("extra#cursor");
  EXPECT_EQ(FirstDifference(unchanged, after_prepare), "");  // no tensor, window or RNG written
  EXPECT_TRUE((*prepared)->Abandon().ok());
  EXPECT_EQ(FirstDifference(before_, Fingerprint(target_.State())), "");
  EXPECT_TRUE((*prepared)->Apply().ok());  // after Abandon: nothing
  EXPECT_EQ(FirstDifference(before_, Fingerprint(target_.State())), "");
}

TEST_F(TwoPhaseTest, ApplyWritesTheSnapshotAndDestroyingUnappliedAbandons) {
  {
    auto dropped = Prepare();
    ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  }
  EXPECT_EQ(FirstDifference(before_, Fingerprint(target_.State())), "");
  auto prepared = Prepare();
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  EXPECT_TRUE((*prepared)->Apply().ok());
  EXPECT_EQ(FirstDifference(expected_, Fingerprint(target_.State())), "");
  EXPECT_TRUE((*prepared)->Abandon().ok());  // after Apply: nothing
  EXPECT_EQ(FirstDifference(expected_, Fingerprint(target_.State())), "");
}

TEST_F(TwoPhaseTest, AnExtraThatRefusesToGoBackMakesAbandonAborted) {
  auto prepared = Prepare();
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  target_.cursor.refuse = true;
  Status undone = (*prepared)->Abandon();
  EXPECT_EQ(undone.code(), StatusCode::kAborted);
  EXPECT_EQ(undone.message(),
            "; restoring `cursor` to its previous state failed: InvalidArgument: cursor refuses to load");
}

}  // namespace
}  // namespace trainsnap
