// Capture through the public Checkpointer against a real store: what a
// snapshot holds (exact byte accounting), deduplication, capture-time errors,
// and the size of a snapshot against torch::save of the same state.
#include "trainsnap/checkpointer.h"

#include <sstream>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "capture/training_rig.h"

namespace trainsnap {
namespace {

using capture_test::Fingerprint;
using capture_test::FirstDifference;
using capture_test::LoraNet;
using capture_test::Opt;
using capture_test::Rig;
using capture_test::TempStore;
using capture_test::Trainable;

uint64_t TrainableBytes(torch::nn::Module& module) {
  uint64_t bytes = 0;
  for (const auto& p : Trainable(module)) bytes += p.nbytes();
  return bytes;
}

TEST(CheckpointerTest, LoraSnapshotHoldsAdaptersOptimizerStateAndPendingGradsOnly) {
  TempStore ts;
  Rig rig(Opt::kAdamW);
  for (int i = 0; i < 4; ++i) rig.MicroStep();  // one full window, then one micro-step
  ASSERT_EQ(rig.window.micro_step, 1);
  Checkpointer checkpointer(*ts.store);
  ASSERT_TRUE(checkpointer.Capture(4, rig.State()).ok());
  const uint64_t adapters = TrainableBytes(*rig.model);
  ASSERT_EQ(adapters, 4u * 64 * 4);  // 4 adapters of 64 float32 each
  auto mid = ts.store->Info(4);
  ASSERT_TRUE(mid.ok()) << mid.status().ToString();
  // adapters + exp_avg + exp_avg_sq + pending gradients; no base weights.
  EXPECT_EQ(mid->logical_bytes, 4 * adapters);
  EXPECT_EQ(mid->tensors, 16u);

  rig.MicroStep();
  rig.MicroStep();  // window boundary: gradients zeroed, not stored
  ASSERT_EQ(rig.window.micro_step, 0);
  ASSERT_TRUE(checkpointer.Capture(6, rig.State()).ok());
  auto boundary = ts.store->Info(6);
  ASSERT_TRUE(boundary.ok());
  EXPECT_EQ(boundary->logical_bytes, 3 * adapters);
  EXPECT_EQ(boundary->tensors, 12u);
  EXPECT_GT(boundary->new_bytes, 0u);

  // Nothing changed: the second capture writes no chunk at all.
  ASSERT_TRUE(checkpointer.Capture(7, rig.State()).ok());
  auto again = ts.store->Info(7);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->logical_bytes, 3 * adapters);
  EXPECT_EQ(again->new_chunks, 0u);
  EXPECT_EQ(again->new_bytes, 0u);
}

TEST(CheckpointerTest, ModelStateSelectsBuffersAndFrozenParameters) {
  torch::manual_seed(3);
  torch::nn::Sequential model(torch::nn::Linear(8, 8), torch::nn::BatchNorm1d(8), torch::nn::Linear(8, 2));
  for (auto& p : model[0]->parameters()) p.set_requires_grad(false);
  model->forward(torch::randn({4, 8}));  // updates the batch-norm statistics
  TrainingState state;
  state.model = model.ptr().get();
  state.rng = false;
  const uint64_t trainable = (8 + 8) * 4 + (16 + 2) * 4;  // bn weight/bias + head weight/bias
  const uint64_t buffers = (8 + 8) * 4 + 8;               // running mean/var + num_batches_tracked
  const uint64_t frozen = (64 + 8) * 4;
  TempStore ts;
  for (auto [mode, step, expected] : {std::tuple{ModelState::kTrainable, 1, trainable},
                                      std::tuple{ModelState::kTrainableAndBuffers, 2, trainable + buffers},
                                      std::tuple{ModelState::kFull, 3, trainable + buffers + frozen}}) {
    CheckpointerOptions options;
    options.model_state = mode;
    Checkpointer checkpointer(*ts.store, options);
    ASSERT_TRUE(checkpointer.Capture(step, state).ok());
    auto info = ts.store->Info(step);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->logical_bytes, expected) << step;
  }
  // kFull restores the frozen base and buffers too.
  torch::manual_seed(4);
  torch::nn::Sequential other(torch::nn::Linear(8, 8), torch::nn::BatchNorm1d(8), torch::nn::Linear(8, 2));
  for (auto& p : other[0]->parameters()) p.set_requires_grad(false);
  TrainingState target;
  target.model = other.ptr().get();
  target.rng = false;
  CheckpointerOptions full;
  full.model_state = ModelState::kFull;
  Checkpointer checkpointer(*ts.store, full);
  Status status = checkpointer.Restore(3, target);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(FirstDifference(Fingerprint(state), Fingerprint(target)), "");
}

TEST(CheckpointerTest, FrozenGradientFailsCaptureAndCommitsNothing) {
  TempStore ts;
  Rig rig(Opt::kAdam);
  rig.model->l1->base->weight.mutable_grad() = torch::zeros({16, 16});
  Checkpointer checkpointer(*ts.store);
  Status status = checkpointer.Capture(1, rig.State());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "capture step 1: frozen parameter `l1.base.weight` (requires_grad=false) holds a gradient");
  auto list = ts.store->List();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
}

TEST(CheckpointerTest, LbfgsFailsCaptureWithNotSupported) {
  TempStore ts;
  torch::manual_seed(0);
  LoraNet net;
  torch::optim::LBFGS lbfgs(Trainable(*net), torch::optim::LBFGSOptions(1.0));
  TrainingState state;
  state.model = net.ptr().get();
  state.optimizer = &lbfgs;
  Checkpointer checkpointer(*ts.store);
  Status status = checkpointer.Capture(1, state);
  EXPECT_EQ(status.code(), StatusCode::kNotSupported);
  EXPECT_EQ(status.message(),
            "capture step 1: optimizer: type LBFGS is not supported (its state is a closure history)");
  EXPECT_TRUE(ts.store->List()->empty());
}

TEST(CheckpointerTest, RestoreLatestOfAnEmptyStoreIsNotFound) {
  TempStore ts;
  Rig rig(Opt::kSgdMomentum);
  Checkpointer checkpointer(*ts.store);
  Result<int64_t> restored = checkpointer.RestoreLatest(rig.State());
  EXPECT_EQ(restored.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(restored.status().message(), "restore latest: the store holds no snapshot");
  EXPECT_EQ(checkpointer.Restore(3, rig.State()).code(), StatusCode::kNotFound);
}

// The figure the issue asks for: bytes per snapshot of a small LoRA-style
// model against torch::save of the same state (trainable tensors +
// optimizer), and against torch::save of the whole model.
TEST(CheckpointerTest, SnapshotSizeAgainstTorchSave) {
  torch::manual_seed(0);
  capture_test::LoraNet net(/*width=*/256, /*rank=*/8);
  torch::optim::AdamW adamw(Trainable(*net), torch::optim::AdamWOptions(1e-3));
  TempStore ts;
  Checkpointer checkpointer(*ts.store);
  TrainingState state;
  state.model = net.ptr().get();
  state.optimizer = &adamw;
  uint64_t torch_save_trainable = 0, torch_save_model = 0;
  std::vector<SnapshotInfo> infos;
  for (int step = 1; step <= 3; ++step) {
    torch::mse_loss(net->forward(torch::randn({8, 256})), torch::randn({8, 256})).backward();
    adamw.step();
    adamw.zero_grad();
    ASSERT_TRUE(checkpointer.Capture(step, state).ok());
    infos.push_back(ts.store->Info(step).value());
    std::ostringstream trainable, whole;
    std::vector<torch::Tensor> tensors = Trainable(*net);
    torch::save(tensors, trainable);
    torch::save(adamw, trainable);
    torch::save(net, whole);
    torch::save(adamw, whole);
    torch_save_trainable = trainable.str().size();
    torch_save_model = whole.str().size();
  }
  // Unchanged state: a fourth snapshot costs no chunk bytes.
  ASSERT_TRUE(checkpointer.Capture(4, state).ok());
  infos.push_back(ts.store->Info(4).value());
  EXPECT_EQ(infos.back().new_bytes, 0u);
  const uint64_t adapters = TrainableBytes(*net);
  EXPECT_EQ(infos[0].logical_bytes, 3 * adapters);
  for (const SnapshotInfo& info : infos) {
    std::cout << "[ size ] step " << info.step << ": logical " << info.logical_bytes << " B, referenced stored "
              << info.stored_bytes << " B, new " << info.new_bytes << " B, manifest " << info.manifest_bytes
              << " B\n";
  }
  std::cout << "[ size ] torch::save(trainable tensors + optimizer): " << torch_save_trainable
            << " B per checkpoint; torch::save(model + optimizer): " << torch_save_model << " B per checkpoint\n";
  RecordProperty("snapshot_new_bytes", std::to_string(infos[1].new_bytes));
  RecordProperty("torch_save_trainable_bytes", std::to_string(torch_save_trainable));
  RecordProperty("torch_save_model_bytes", std::to_string(torch_save_model));
  EXPECT_LT(infos[1].new_bytes + infos[1].manifest_bytes, torch_save_model);
}

}  // namespace
}  // namespace trainsnap
