// Restore-time checks, each with its exact code and a message that names the
// first mismatch.
#include "restore/validate.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "torch/manifest_format.h"
#include "testing/training_rig.h"
#include "trainsnap/checkpointer.h"

namespace trainsnap {
namespace {

using capture_test::LoraNet;
using capture_test::Opt;
using capture_test::Rig;
using capture_test::TempStore;
using capture_test::Trainable;

// Captures a LoRA net (width 16, rank 4) with Adam as step 1.
class ValidateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(0);
    net_ = LoraNet();
    adam_ = std::make_unique<torch::optim::Adam>(Trainable(*net_));
    Capture(CheckpointerOptions());
  }
  void Capture(const CheckpointerOptions& options) {
    TrainingState state;
    state.model = net_.ptr().get();
    state.optimizer = adam_.get();
    ASSERT_TRUE(Checkpointer(*ts_.store, options).Capture(++step_, state).ok());
  }
  Status RestoreInto(torch::nn::Module& model, torch::optim::Optimizer* optimizer,
                     const CheckpointerOptions& options = {}) {
    TrainingState target;
    target.model = &model;
    target.optimizer = optimizer;
    return Checkpointer(*ts_.store, options).Restore(step_, target);
  }
  TempStore ts_;
  LoraNet net_{nullptr};
  std::unique_ptr<torch::optim::Adam> adam_;
  int64_t step_ = 0;
};

TEST_F(ValidateTest, ShapeMismatchNamesParameterExpectedAndActual) {
  LoraNet other(/*width=*/16, /*rank=*/8);
  torch::optim::Adam adam(Trainable(*other));
  Status status = RestoreInto(*other, &adam);
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(status.message(), "restore step 1: parameter `l1.lora_a`: expected shape [4, 16], actual [8, 16]");
}

TEST_F(ValidateTest, DtypeMismatch) {
  LoraNet other;
  other->to(torch::kFloat64);
  torch::optim::Adam adam(Trainable(*other));
  Status status = RestoreInto(*other, &adam);
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(status.message(), "restore step 1: parameter `l1.lora_a`: expected dtype float32, actual float64");
}

TEST_F(ValidateTest, ParameterFrozenInTheTarget) {
  LoraNet other;
  other->l2->lora_b.set_requires_grad(false);
  torch::optim::Adam adam(Trainable(*other));
  Status status = RestoreInto(*other, &adam);
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(status.message(),
            "restore step 1: parameter `l2.lora_b`: expected a trainable parameter, actual: frozen in the target");
}

TEST_F(ValidateTest, ExtraTrainableParameterInTheTarget) {
  LoraNet other;
  other->register_parameter("extra", torch::zeros({3}));
  torch::optim::Adam adam(Trainable(*other));
  Status status = RestoreInto(*other, &adam);
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(status.message(),
            "restore step 1: parameter `extra`: expected absent (not in the snapshot), actual: trainable in the target");
}

TEST_F(ValidateTest, TyingMismatch) {
  auto tied = std::make_shared<torch::nn::Module>();
  auto untied = std::make_shared<torch::nn::Module>();
  torch::Tensor w = torch::randn({2, 2});
  tied->register_parameter("a", w);
  tied->register_parameter("b", w);
  untied->register_parameter("a", torch::randn({2, 2}));
  untied->register_parameter("b", torch::randn({2, 2}));
  TrainingState state;
  state.model = tied.get();
  ASSERT_TRUE(Checkpointer(*ts_.store).Capture(50, state).ok());
  TrainingState target;
  target.model = untied.get();
  Status status = Checkpointer(*ts_.store).Restore(50, target);
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(status.message(), "restore step 50: parameter `a`: expected names (tying) [a, b], actual [a]");
}

TEST_F(ValidateTest, BaseLabelMismatch) {
  CheckpointerOptions labelled;
  labelled.base_label = "base-v1";
  Capture(labelled);
  LoraNet other;
  torch::optim::Adam adam(Trainable(*other));
  CheckpointerOptions wrong;
  wrong.base_label = "base-v2";
  Status status = RestoreInto(*other, &adam, wrong);
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(status.message(), "restore step 2: frozen base: expected label \"base-v1\", actual \"base-v2\"");
  EXPECT_TRUE(RestoreInto(*other, &adam, labelled).ok());
}

TEST_F(ValidateTest, BaseContentMismatch) {
  CheckpointerOptions hashed;
  hashed.hash_base_content = true;
  Capture(hashed);
  torch::manual_seed(0);
  LoraNet same;
  torch::optim::Adam adam(Trainable(*same));
  ASSERT_TRUE(RestoreInto(*same, &adam).ok());
  torch::manual_seed(0);
  LoraNet other;
  {
    torch::NoGradGuard guard;
    other->l1->base->bias[0] += 1;
  }
  torch::optim::Adam other_adam(Trainable(*other));
  Status status = RestoreInto(*other, &other_adam);
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_NE(status.message().find("frozen base: content hash differs"), std::string::npos) << status.message();
}

TEST_F(ValidateTest, BaseShapeMismatch) {
  torch::manual_seed(0);
  LoraNet other;
  other->l2->base->bias.set_data(torch::zeros({17}));
  torch::optim::Adam adam(Trainable(*other));
  Status status = RestoreInto(*other, &adam);
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(status.message(), "restore step 1: frozen base: parameter `l2.base.bias`: expected shape [16], actual [17]");
}

TEST_F(ValidateTest, TargetOnAnUnsupportedDevice) {
  auto source = std::make_shared<torch::nn::Module>();
  source->register_parameter("w", torch::ones({2}));
  auto meta = std::make_shared<torch::nn::Module>();
  meta->register_parameter("w", torch::empty({2}, torch::kMeta));
  TrainingState state;
  state.model = source.get();
  ASSERT_TRUE(Checkpointer(*ts_.store).Capture(40, state).ok());
  TrainingState target;
  target.model = meta.get();
  Status status = Checkpointer(*ts_.store).Restore(40, target);
  EXPECT_EQ(status.code(), StatusCode::kNotSupported);
  EXPECT_EQ(status.message(), "restore step 40: tensor `w` lives on device meta; restore copies to CPU and CUDA only");
}

TEST_F(ValidateTest, OptimizerTypeAndGroupMismatch) {
  LoraNet other;
  torch::optim::SGD sgd(Trainable(*other), torch::optim::SGDOptions(0.1));
  Status status = RestoreInto(*other, &sgd);
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(status.message(), "restore step 1: optimizer (unnamed): expected type Adam, actual SGD");

  torch::optim::Adam partial({other->l1->lora_a, other->l1->lora_b});
  status = RestoreInto(*other, &partial);
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(status.message(),
            "restore step 1: optimizer (unnamed): param group 0: expected 4 parameters, actual 2, membership differs");

  status = RestoreInto(*other, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(status.message(), "restore step 1: optimizer (unnamed): in the snapshot, absent from the target");
}

TEST_F(ValidateTest, CompositionMismatch) {
  Rig rig(Opt::kAdam);
  TrainingState target = rig.State();
  target.scheduler = nullptr;
  TrainingState source = rig.State();
  ASSERT_TRUE(Checkpointer(*ts_.store).Capture(60, source).ok());
  Status status = Checkpointer(*ts_.store).Restore(60, target);
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(status.message(), "restore step 60: scheduler: in the snapshot, absent from the target");
  target = rig.State();
  target.extra.erase("cursor");
  status = Checkpointer(*ts_.store).Restore(60, target);
  EXPECT_EQ(status.message(), "restore step 60: extra state `cursor`: in the snapshot, absent from the target");
  target = rig.State();
  target.models["second"] = rig.model.ptr().get();
  status = Checkpointer(*ts_.store).Restore(60, target);
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(status.message(), "restore step 60: models: expected [\"\"], actual [\"\", \"second\"]");
}

TEST_F(ValidateTest, UnknownFormatVersionAndGarbageManifest) {
  proto::TrainingManifest manifest;
  manifest.set_format_version(internal::kManifestFormatVersion + 1);
  auto writer = ts_.store->BeginSnapshot(70);
  ASSERT_TRUE(writer.ok());
  (*writer)->SetManifest(manifest.SerializeAsString());
  ASSERT_TRUE((*writer)->Commit().ok());
  Status status = RestoreInto(*net_, adam_.get());
  ASSERT_TRUE(status.ok()) << status.ToString();  // step 1 still fine
  TrainingState target;
  target.model = net_.ptr().get();
  target.optimizer = adam_.get();
  status = Checkpointer(*ts_.store).Restore(70, target);
  EXPECT_EQ(status.code(), StatusCode::kNotSupported);
  EXPECT_EQ(status.message(), "restore step 70: manifest format version 3 (this build reads version 2)");

  auto garbage = ts_.store->BeginSnapshot(71);
  ASSERT_TRUE(garbage.ok());
  (*garbage)->SetManifest(std::string("\xff\xff\xff\xff garbage", 12));
  ASSERT_TRUE((*garbage)->Commit().ok());
  EXPECT_EQ(Checkpointer(*ts_.store).Restore(71, target).code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace trainsnap
