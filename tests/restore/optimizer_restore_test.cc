// Restore of optimizer state: which tensors a stored optimizer needs, how
// its groups' options and per-parameter state are rebuilt for the target,
// and the errors for state the manifest describes inconsistently.
#include "restore/optimizer_restore.h"

#include <optional>
#include <string>
#include <utility>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "capture/stage.h"
#include "testing/training_rig.h"
#include "torch/optimizer_traits.h"

namespace trainsnap::internal {
namespace {

using capture_test::BitwiseEqual;
using capture_test::Opt;
using capture_test::Rig;

// A staged snapshot of `rig` and its staged tensors as restore decodes them,
// but for `missing` (param_id, role), when given.
struct Snapshot {
  std::unique_ptr<StagedSnapshot> staged;
  DecodedTensors decoded;
};

Snapshot Take(Rig& rig, std::optional<std::pair<uint64_t, std::string>> missing = std::nullopt) {
  BaseIdentityBuilder base;
  auto staged = Stage(1, rig.State(), CheckpointerOptions(), base);
  EXPECT_TRUE(staged.ok()) << staged.status().ToString();
  Snapshot out{std::move(staged).value(), {}};
  for (const StagedTensor& tensor : out.staged->staging.tensors()) {
    if (missing == std::make_pair(tensor.param_id, tensor.role)) continue;
    out.decoded.Add(tensor.param_id, tensor.role, tensor.host.clone());
  }
  return out;
}

Contract ContractOf(Rig& rig) {
  auto models = CollectModels(rig.State());
  EXPECT_TRUE(models.ok());
  auto contract = BuildContract(*models);
  EXPECT_TRUE(contract.ok());
  return std::move(contract).value();
}

TEST(OptimizerRestoreTest, WantsEveryStoredStateTensorShapedLikeItsTargetParameter) {
  Rig rig(Opt::kAdam);
  for (int i = 0; i < 3; ++i) rig.MicroStep();
  Snapshot snapshot = Take(rig);
  std::vector<WantedTensor> wanted;
  const Contract contract = ContractOf(rig);  // the wanted tensors' names and shapes point into it
  ASSERT_TRUE(WantOptimizerTensors(snapshot.staged->manifest.optimizers(0), contract, &wanted).ok());
  ASSERT_EQ(wanted.size(), 8u);  // 4 trainable parameters x (exp_avg, exp_avg_sq)
  EXPECT_EQ(*wanted[0].name, "l1.lora_a");
  EXPECT_EQ(wanted[0].role, "exp_avg");
  EXPECT_EQ(wanted[0].shape.vec(), rig.model->l1->lora_a.sizes().vec());
  EXPECT_EQ(wanted[1].role, "exp_avg_sq");
}

TEST(OptimizerRestoreTest, PreparesAndAppliesTheSnapshotsStateAndOptionsBitwise) {
  Rig saved(Opt::kAdamW);
  for (int i = 0; i < 6; ++i) saved.MicroStep();  // two optimizer steps; StepLR halved lr once
  Snapshot snapshot = Take(saved);
  Rig target(Opt::kAdamW, /*seed=*/2);  // fresh optimizer: no state, the initial lr
  const Contract contract = ContractOf(target);
  const proto::OptimizerManifest& stored = snapshot.staged->manifest.optimizers(0);

  // The target's own options kept: its lr stays.
  auto kept = PrepareOptimizer(stored, *target.optimizer, contract, snapshot.decoded, /*restore_options=*/false);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_TRUE(kept->group_options.empty());

  auto prepared = PrepareOptimizer(stored, *target.optimizer, contract, snapshot.decoded);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  EXPECT_TRUE(target.optimizer->state().empty());  // nothing applied yet
  ApplyOptimizer(*prepared);
  EXPECT_EQ(target.optimizer->param_groups()[0].options().get_lr(),
            saved.optimizer->param_groups()[0].options().get_lr());
  ASSERT_EQ(target.optimizer->state().size(), 4u);
  const auto& restored = static_cast<const torch::optim::AdamWParamState&>(
      *target.optimizer->state().at(OptimizerStateKey(target.model->l2->lora_b)));
  const auto& original = static_cast<const torch::optim::AdamWParamState&>(
      *saved.optimizer->state().at(OptimizerStateKey(saved.model->l2->lora_b)));
  EXPECT_EQ(restored.step(), original.step());
  EXPECT_TRUE(BitwiseEqual(restored.exp_avg(), original.exp_avg()));
  EXPECT_TRUE(BitwiseEqual(restored.exp_avg_sq(), original.exp_avg_sq()));
}

TEST(OptimizerRestoreTest, StateMissingFromTheDecodedTensorsIsCorruptionNamingTheParameter) {
  Rig rig(Opt::kAdam);
  for (int i = 0; i < 3; ++i) rig.MicroStep();
  const Contract contract = ContractOf(rig);
  const uint64_t id = contract.trainable.front().id;
  Snapshot snapshot = Take(rig, std::make_pair(id, std::string("exp_avg_sq")));
  auto prepared = PrepareOptimizer(snapshot.staged->manifest.optimizers(0), *rig.optimizer, contract, snapshot.decoded);
  EXPECT_EQ(prepared.status(), Status::Corruption("parameter `l1.lora_a` role exp_avg_sq: not decoded"));
}

TEST(OptimizerRestoreTest, StateOfAParameterOfNoTargetModelIsAContractMismatch) {
  Rig rig(Opt::kAdam);
  for (int i = 0; i < 3; ++i) rig.MicroStep();
  Snapshot snapshot = Take(rig);
  proto::OptimizerManifest stored = snapshot.staged->manifest.optimizers(0);
  stored.mutable_params(0)->set_param_id(12345);
  std::vector<WantedTensor> wanted;
  EXPECT_EQ(WantOptimizerTensors(stored, ContractOf(rig), &wanted),
            Status::ContractMismatch("optimizer state of parameter ID 12345: absent from the target models"));
}

}  // namespace
}  // namespace trainsnap::internal
