// RestoreOptions::partial (src/restore/partial.cc): a restore of part of a
// snapshot restores exactly what the target holds, reads only its tensors,
// and refuses what it cannot check.
#include "restore/partial.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "restore/decode.h"
#include "restore/restore_snapshot.h"
#include "testing/training_rig.h"
#include "torch/base_identity.h"
#include "trainsnap/checkpointer.h"

namespace trainsnap {
namespace {

using capture_test::TempStore;

// Two models with an Adam each, trained one step (so that both optimizers
// have state); `frozen_disc` freezes the discriminator's first layer.
struct TwoModels {
  explicit TwoModels(uint64_t seed, bool frozen_disc = false) {
    torch::manual_seed(seed);
    gen = torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::Linear(8, 6));
    disc = torch::nn::Sequential(torch::nn::Linear(6, 8), torch::nn::Linear(8, 1));
    if (frozen_disc) {
      for (auto& p : disc[0]->parameters()) p.set_requires_grad(false);
    }
    gen_opt = std::make_unique<torch::optim::Adam>(gen->parameters(), torch::optim::AdamOptions(1e-2));
    std::vector<torch::Tensor> trainable;
    for (auto& p : disc->parameters()) {
      if (p.requires_grad()) trainable.push_back(p);
    }
    disc_opt = std::make_unique<torch::optim::Adam>(trainable, torch::optim::AdamOptions(1e-2));
    disc->forward(gen->forward(torch::randn({5, 4}))).sum().backward();
    gen_opt->step();
    disc_opt->step();
  }
  TrainingState All() {
    TrainingState state;
    state.models = {{"gen", gen.ptr().get()}, {"disc", disc.ptr().get()}};
    state.optimizers = {{"gen", gen_opt.get()}, {"disc", disc_opt.get()}};
    return state;
  }
  // The generator alone, no RNG: what evaluation loading gives.
  TrainingState GenOnly() {
    TrainingState state;
    state.models = {{"gen", gen.ptr().get()}};
    state.rng = false;
    return state;
  }
  torch::nn::Sequential gen{nullptr}, disc{nullptr};
  std::unique_ptr<torch::optim::Adam> gen_opt, disc_opt;
};

bool SameBytes(torch::nn::Module& a, torch::nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  if (pa.size() != pb.size()) return false;
  for (size_t i = 0; i < pa.size(); ++i) {
    if (pa[i].nbytes() != pb[i].nbytes() || std::memcmp(pa[i].data_ptr(), pb[i].data_ptr(), pa[i].nbytes()) != 0) {
      return false;
    }
  }
  return true;
}

std::vector<torch::Tensor> Copies(torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (auto& p : module.parameters()) out.push_back(p.detach().clone());
  return out;
}

bool Unchanged(torch::nn::Module& module, const std::vector<torch::Tensor>& before) {
  auto now = module.parameters();
  for (size_t i = 0; i < now.size(); ++i) {
    if (std::memcmp(now[i].data_ptr(), before[i].data_ptr(), now[i].nbytes()) != 0) return false;
  }
  return now.size() == before.size();
}

// Decodes from the store, recording (name, role) of every tensor asked for.
class RecordingReader final : public internal::TensorReader {
 public:
  explicit RecordingReader(Store& store) : store_(store) {}
  Result<internal::DecodedTensors> Read(int64_t step, const proto::TrainingManifest&,
                                        const std::vector<internal::WantedTensor>& wanted) override {
    for (const auto& want : wanted) read.emplace(*want.name, want.role);
    return internal::DecodeTensors(store_, step, wanted);
  }
  std::set<std::pair<std::string, std::string>> read;

 private:
  Store& store_;
};

RestoreOptions Partial() {
  RestoreOptions options;
  options.partial = true;
  return options;
}

// A snapshot of TwoModels(1) at step 1, and a target of another history.
class PartialRestoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(Checkpointer(*ts.store).Capture(1, reference.All()).ok()); }
  TempStore ts;
  TwoModels reference{1};
  TwoModels target{2};
};

TEST_F(PartialRestoreTest, OneModelOfTwoIsRestoredAndNothingElseIsRead) {
  const auto disc_before = Copies(*target.disc);
  // Not partial: the snapshot's composition must match.
  Status whole = Checkpointer(*ts.store).Restore(1, target.GenOnly());
  EXPECT_EQ(whole.code(), StatusCode::kContractMismatch) << whole.ToString();
  EXPECT_EQ(whole.message(), "restore step 1: models: expected [\"disc\", \"gen\"], actual [\"gen\"]");
  EXPECT_FALSE(SameBytes(*target.gen, *reference.gen));

  RestoreOptions options = Partial();
  options.restore_gradients = false;
  RecordingReader reader(*ts.store);
  internal::BaseIdentityBuilder base;
  internal::SnapshotInput input;
  input.reader = &reader;
  auto prepared = internal::PrepareRestore(*ts.store, 1, target.GenOnly(), options, "", base, nullptr, input);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  ASSERT_TRUE((*prepared)->Apply().ok());
  // Exactly the generator's four parameters were read: no optimizer state,
  // nothing of the discriminator.
  const std::set<std::pair<std::string, std::string>> expected = {
      {"gen/0.weight", "param"}, {"gen/0.bias", "param"}, {"gen/1.weight", "param"}, {"gen/1.bias", "param"}};
  EXPECT_EQ(reader.read, expected);
  EXPECT_TRUE(SameBytes(*target.gen, *reference.gen));
  EXPECT_TRUE(Unchanged(*target.disc, disc_before));

  // The same through the public call.
  TwoModels other(3);
  Status restored = Checkpointer(*ts.store).Restore(1, other.GenOnly(), options);
  ASSERT_TRUE(restored.ok()) << restored.ToString();
  EXPECT_TRUE(SameBytes(*other.gen, *reference.gen));
}

TEST_F(PartialRestoreTest, AnOptimizerWithoutItsModelIsAContractMismatchAndChangesNothing) {
  const auto gen_before = Copies(*target.gen);
  TrainingState state = target.GenOnly();
  state.optimizers = {{"disc", target.disc_opt.get()}};
  Status status = Checkpointer(*ts.store).Restore(1, state, Partial());
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch) << status.ToString();
  EXPECT_TRUE(Unchanged(*target.gen, gen_before));
}

TEST_F(PartialRestoreTest, WhatTheTargetHoldsMustBeInTheSnapshot) {
  const auto gen_before = Copies(*target.gen);
  AccumulationWindow window;
  TrainingState state = target.GenOnly();
  state.accumulation = &window;
  Status status = Checkpointer(*ts.store).Restore(1, state, Partial());
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(status.message(), "restore step 1: accumulation window: in the target, absent from the snapshot");
  EXPECT_TRUE(Unchanged(*target.gen, gen_before));
}

TEST_F(PartialRestoreTest, ATargetThatHoldsNothingIsRefused) {
  TrainingState nothing;
  nothing.rng = false;
  Status status = Checkpointer(*ts.store).Restore(1, nothing, Partial());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_EQ(status.message(), "restore step 1: partial restore: the target holds nothing to restore");
  // The RNG alone is something.
  TrainingState rng_only;
  Status restored = Checkpointer(*ts.store).Restore(1, rng_only, Partial());
  EXPECT_TRUE(restored.ok()) << restored.ToString();
}

TEST(PartialRestoreFrozenBaseTest, ALeftOutFrozenBaseIsRefusedOnlyWhenItsContentHashCoversIt) {
  for (bool hashed : {false, true}) {
    SCOPED_TRACE(hashed ? "hash_base_content" : "no content hash");
    TempStore ts;
    TwoModels reference(1, /*frozen_disc=*/true);
    CheckpointerOptions capture_options;
    capture_options.model_state = ModelState::kFull;
    capture_options.hash_base_content = hashed;
    ASSERT_TRUE(Checkpointer(*ts.store, capture_options).Capture(1, reference.All()).ok());
    TwoModels target(2, /*frozen_disc=*/true);
    const auto gen_before = Copies(*target.gen);
    Status status = Checkpointer(*ts.store).Restore(1, target.GenOnly(), Partial());
    if (hashed) {
      EXPECT_EQ(status.code(), StatusCode::kNotSupported) << status.ToString();
      EXPECT_EQ(status.message(),
                "restore step 1: partial restore: model `disc` is left out and has frozen parameter `disc/0.weight`, "
                "which the snapshot's base content hash covers: give the model");
      EXPECT_TRUE(Unchanged(*target.gen, gen_before));
    } else {
      ASSERT_TRUE(status.ok()) << status.ToString();
      EXPECT_TRUE(SameBytes(*target.gen, *reference.gen));
    }
  }
}

}  // namespace
}  // namespace trainsnap
