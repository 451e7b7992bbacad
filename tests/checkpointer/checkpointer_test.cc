// Capture through the public Checkpointer against a real store: what a
// snapshot holds (exact byte accounting), deduplication, capture-time errors,
// and the size of a snapshot against torch::save of the same state.
#include "trainsnap/checkpointer.h"

#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/training_rig.h"

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

// A Checkpointer reuses its models' contract between captures and restores
// (torch/contract_cache.h); a change to the models between two captures is
// in the second snapshot all the same.
TEST(CheckpointerTest, ModelChangesBetweenCapturesReachTheNextSnapshot) {
  TempStore ts;
  Rig rig(Opt::kAdamW);
  for (int i = 0; i < 4; ++i) rig.MicroStep();  // one window of 3, then one micro-step
  ASSERT_EQ(rig.window.micro_step, 1);
  Checkpointer checkpointer(*ts.store);
  ASSERT_TRUE(checkpointer.Capture(1, rig.State()).ok());
  ASSERT_TRUE(checkpointer.Capture(2, rig.State()).ok());  // unchanged models
  // 4 adapters, their pending gradients, exp_avg and exp_avg_sq of each.
  EXPECT_EQ(ts.store->Info(2)->tensors, 16u);

  // Frozen: neither it nor a gradient is captured any more; the optimizer
  // still holds its state.
  rig.model->l1->lora_a.mutable_grad() = torch::Tensor();  // a frozen parameter may hold none
  rig.model->l1->lora_a.set_requires_grad(false);
  Status captured_frozen = checkpointer.Capture(3, rig.State());
  ASSERT_TRUE(captured_frozen.ok()) << captured_frozen.ToString();
  auto frozen = ts.store->Tensors(3);
  ASSERT_TRUE(frozen.ok()) << frozen.status().ToString();
  EXPECT_EQ(frozen->size(), 14u);

  // A new trainable parameter (no gradient yet, no optimizer state):
  // captured from the next snapshot on.
  rig.model->l2->register_parameter("scale", torch::ones({3}));
  Status captured_grown = checkpointer.Capture(4, rig.State());
  ASSERT_TRUE(captured_grown.ok()) << captured_grown.ToString();
  auto grown = ts.store->Tensors(4);
  ASSERT_TRUE(grown.ok());
  EXPECT_EQ(grown->size(), 15u);
  std::multiset<std::string> roles;
  for (const TensorRecord& record : *grown) roles.insert(record.role);
  EXPECT_EQ(roles.count("param"), 4u);  // l1.lora_b, l2.lora_a, l2.lora_b, l2.scale

  // Restore into these models (the cached contract) gives back step 4.
  const auto captured = Fingerprint(rig.State());
  {
    torch::NoGradGuard no_grad;
    for (auto& p : Trainable(*rig.model)) p.add_(1);  // what a trainable-only snapshot restores
  }
  Status restored = checkpointer.Restore(4, rig.State());
  ASSERT_TRUE(restored.ok()) << restored.ToString();
  EXPECT_EQ(FirstDifference(captured, Fingerprint(rig.State())), "");
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

// RetentionPolicy counts steps: with keep_last = 2, a capture below the
// latest step is refused before anything is written (its own commit would
// otherwise prune it and RestoreLatest return the later step), and every
// capture that is acknowledged is still stored after its commit's prune.
TEST(CheckpointerTest, RetentionRefusesAStepBelowTheLatestAndKeepsWhatItAcknowledged) {
  TempStore ts;
  ts.Close();
  RetentionPolicy retention;
  retention.keep_last = 2;
  ts.Open(retention);
  Rig rig(Opt::kAdam);
  Checkpointer checkpointer(*ts.store);
  std::map<int64_t, std::map<std::string, torch::Tensor>> states;
  for (int64_t step = 1; step <= 5; ++step) {
    rig.MicroStep();
    ASSERT_TRUE(checkpointer.Capture(step, rig.State()).ok());
    ASSERT_TRUE(ts.store->Info(step).ok()) << "step " << step << " pruned by its own commit";
    states[step] = Fingerprint(rig.State());
  }
  auto steps = [&] {
    std::vector<int64_t> out;
    auto list = ts.store->List();  // named: a range-for over List().value() would dangle
    for (const SnapshotInfo& info : list.value()) out.push_back(info.step);
    return out;
  };
  ASSERT_EQ(steps(), (std::vector<int64_t>{4, 5}));

  // A run resumed from step 4 that reuses the old step counter.
  Rig resumed(Opt::kAdam);
  ASSERT_TRUE(checkpointer.Restore(4, resumed.State()).ok());
  resumed.MicroStep();
  Status status = checkpointer.Capture(3, resumed.State());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "capture step 3: commit: below the latest stored step 5: retention (keep_last = 2) keeps the highest "
            "steps and RestoreLatest returns the highest; Rollback to the step the run resumed from first, or keep "
            "steps increasing");
  EXPECT_EQ(steps(), (std::vector<int64_t>{4, 5}));
  Rig latest(Opt::kAdam);
  ASSERT_TRUE(checkpointer.RestoreLatest(latest.State()).ok());
  EXPECT_EQ(FirstDifference(states[5], Fingerprint(latest.State())), "");

  // What the header says to do: roll back to the step resumed from, then
  // capture on; RestoreLatest returns the resumed run's state.
  ASSERT_TRUE(ts.store->Rollback(4).ok());
  ASSERT_TRUE(checkpointer.Capture(5, resumed.State()).ok());
  const auto resumed_state = Fingerprint(resumed.State());
  resumed.MicroStep();
  ASSERT_TRUE(checkpointer.Capture(6, resumed.State()).ok());
  EXPECT_EQ(steps(), (std::vector<int64_t>{5, 6}));
  Rig check(Opt::kAdam);
  ASSERT_TRUE(checkpointer.Restore(5, check.State()).ok());
  EXPECT_EQ(FirstDifference(resumed_state, Fingerprint(check.State())), "");
  ASSERT_TRUE(checkpointer.RestoreLatest(check.State()).ok());
  EXPECT_EQ(FirstDifference(Fingerprint(resumed.State()), Fingerprint(check.State())), "");
}

// Tensors the pipeline cannot stage fail the capture with NotSupported
// naming the tensor; nothing is committed and the checkpointer goes on.
TEST(CheckpointerTest, UnstageableTensorsAreNotSupportedAndNamed) {
  TempStore ts;
  Checkpointer checkpointer(*ts.store);
  auto expect_refused = [&](torch::nn::Module& module, ModelState mode, const std::string& message) {
    TrainingState state;
    state.model = &module;
    state.rng = false;
    CheckpointerOptions options;
    options.model_state = mode;
    Checkpointer with_mode(*ts.store, options);
    Status status = with_mode.Capture(1, state);
    EXPECT_EQ(status.code(), StatusCode::kNotSupported) << status.ToString();
    EXPECT_EQ(status.message(), message);
  };
  {
    torch::nn::Module module;
    module.register_parameter("w", torch::randn({4}));
    module.register_parameter("meta_w", torch::empty({4, 4}, torch::TensorOptions().device(torch::kMeta)));
    expect_refused(module, ModelState::kTrainable,
                   "capture step 1: parameter `meta_w`: meta tensor: it has no data to capture");
  }
  {
    torch::nn::Module module;  // a frozen meta base, captured under kFull only
    module.register_parameter("w", torch::randn({4}));
    module.register_parameter("base", torch::empty({8}, torch::TensorOptions().device(torch::kMeta)),
                              /*requires_grad=*/false);
    expect_refused(module, ModelState::kFull, "capture step 1: parameter `base`: meta tensor: it has no data to capture");
  }
  {
    torch::nn::Module module;
    module.register_parameter("w", torch::randn({3, 3}));
    module.register_buffer("adjacency", torch::eye(3).to_sparse());
    expect_refused(module, ModelState::kTrainableAndBuffers,
                   "capture step 1: buffer `adjacency`: sparse tensor (layout Sparse): only dense (strided) tensors "
                   "are captured; convert it with to_dense()");
  }
  {
    torch::nn::Module module;
    torch::Tensor w = module.register_parameter("w", torch::randn({3, 3}));
    w.mutable_grad() = torch::eye(3).to_sparse();  // an embedding's sparse gradient
    expect_refused(module, ModelState::kTrainable,
                   "capture step 1: parameter `w`: gradient: sparse tensor (layout Sparse): only dense (strided) "
                   "tensors are captured; convert it with to_dense()");
  }
  if (at::hasMKLDNN()) {  // mkldnn tensors exist only in builds with oneDNN
    torch::nn::Module module;
    module.register_parameter("w", torch::randn({3, 3}));
    module.register_buffer("packed", torch::randn({2, 2}).to_mkldnn());
    expect_refused(module, ModelState::kTrainableAndBuffers,
                   "capture step 1: buffer `packed`: mkldnn tensor: only dense (strided) tensors are captured; "
                   "convert it with to_dense()");
  }
  EXPECT_TRUE(ts.store->List()->empty());
  Rig rig(Opt::kAdam);
  ASSERT_TRUE(checkpointer.Capture(2, rig.State()).ok());
}

// A Stateful may throw anything; Capture turns it into Aborted and commits nothing.
TEST(CheckpointerTest, NonStandardExceptionFromAStatefulIsAborted) {
  struct Throws : Stateful {
    std::string SaveState() const override { throw 42; }
    Status LoadState(std::string_view) override { return Status::OK(); }
  } throws;
  TempStore ts;
  Rig rig(Opt::kAdam);
  TrainingState state = rig.State();
  state.extra["throws"] = &throws;
  Checkpointer checkpointer(*ts.store);
  Status status = checkpointer.Capture(1, state);
  EXPECT_EQ(status.code(), StatusCode::kAborted);
  EXPECT_EQ(status.message(),
            "capture step 1: extra state `throws`: SaveState threw an exception that is not a std::exception");
  EXPECT_TRUE(ts.store->List()->empty());
}

// One exception boundary: a LibTorch error is Aborted like any other
// exception (checkpointer.h), and the message names the step and the extra
// once each, then what LibTorch said, without its backtrace.
TEST(CheckpointerTest, LibTorchErrorInAStatefulIsAbortedNamingStepAndExtraOnce) {
  struct Checks : Stateful {
    std::string SaveState() const override {
      TORCH_CHECK(false, "loader state is not ready");
      return "";
    }
    Status LoadState(std::string_view) override { return Status::OK(); }
  } checks;
  TempStore ts;
  Rig rig(Opt::kAdam);
  TrainingState state = rig.State();
  state.extra["loader"] = &checks;
  Checkpointer checkpointer(*ts.store);
  Status status = checkpointer.Capture(1, state);
  EXPECT_EQ(status, Status::Aborted("capture step 1: extra state `loader`: SaveState threw: LibTorch: loader state is "
                                    "not ready"));
  EXPECT_TRUE(ts.store->List()->empty());
  // The same boundary on restore: a snapshot taken without the failing extra,
  // restored into a target whose LoadState throws.
  struct ThrowsOnLoad : Stateful {
    std::string SaveState() const override { return "x"; }
    Status LoadState(std::string_view) override { throw std::runtime_error("no room for the loader"); }
  } throws_on_load;
  state.extra["loader"] = &throws_on_load;
  ASSERT_TRUE(checkpointer.Capture(2, state).ok());
  Status restored = checkpointer.Restore(2, state);
  EXPECT_EQ(restored, Status::Aborted("restore step 2: extra state `loader`: LoadState threw: no room for the loader"));
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


// --- defaults: buffers (BatchNorm) -------------------------------------------

// A model with BatchNorm in training mode and Adam; batch i is a pure function
// of i. Every forward pass moves the running statistics and the batch counter.
struct BatchNormLoop {
  explicit BatchNormLoop(uint64_t seed) {
    torch::manual_seed(seed);
    model = torch::nn::Sequential(torch::nn::Linear(6, 8), torch::nn::BatchNorm1d(8), torch::nn::ReLU(),
                                  torch::nn::Linear(8, 2));
    optimizer = std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-2));
  }
  void Step(int64_t index) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(500 + index);
    torch::Tensor x = torch::randn({10, 6}, gen), y = torch::randn({10, 2}, gen);
    optimizer->zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    optimizer->step();
  }
  TrainingState State() {
    TrainingState state;  // defaults only
    state.model = model.ptr().get();
    state.optimizer = optimizer.get();
    return state;
  }
  torch::nn::Sequential model{nullptr};
  std::unique_ptr<torch::optim::Adam> optimizer;
};

size_t RecordsWithRole(Store& store, int64_t step, const std::string& role) {
  auto records = store.Tensors(step);
  EXPECT_TRUE(records.ok()) << records.status().ToString();
  size_t n = 0;
  for (const TensorRecord& record : records.value_or({})) n += record.role == role ? 1 : 0;
  return n;
}

TEST(CheckpointerDefaultsTest, BatchNormStatisticsAreCapturedAndTheResumeIsBitExact) {
  EXPECT_EQ(CheckpointerOptions().model_state, ModelState::kTrainableAndBuffers);
  TempStore ts;
  BatchNormLoop reference(1);
  for (int64_t i = 0; i <= 3; ++i) reference.Step(i);
  Checkpointer checkpointer(*ts.store);
  ASSERT_TRUE(checkpointer.Capture(3, reference.State()).ok());
  const auto at_capture = Fingerprint(reference.State());
  for (int64_t i = 4; i <= 7; ++i) reference.Step(i);
  const auto expected = Fingerprint(reference.State());
  // running_mean, running_var, num_batches_tracked.
  EXPECT_EQ(RecordsWithRole(*ts.store, 3, "buffer"), 3u);

  BatchNormLoop resumed(2);  // other weights, fresh statistics, other RNG state
  const auto fresh = Fingerprint(resumed.State());
  for (const char* buffer : {"1.running_mean#buffer", "1.running_var#buffer", "1.num_batches_tracked#buffer"}) {
    EXPECT_FALSE(capture_test::BitwiseEqual(at_capture.at(buffer), fresh.at(buffer))) << buffer;
  }
  ASSERT_TRUE(checkpointer.Restore(3, resumed.State()).ok());
  EXPECT_EQ(FirstDifference(at_capture, Fingerprint(resumed.State())), "");
  for (int64_t i = 4; i <= 7; ++i) resumed.Step(i);
  EXPECT_EQ(FirstDifference(expected, Fingerprint(resumed.State())), "");
}

TEST(CheckpointerDefaultsTest, SnapshotWithoutBuffersIsAContractMismatchUnlessAccepted) {
  TempStore ts;
  BatchNormLoop reference(1);
  for (int64_t i = 0; i <= 3; ++i) reference.Step(i);
  CheckpointerOptions trainable_only;
  trainable_only.model_state = ModelState::kTrainable;  // the explicit opt-out
  ASSERT_TRUE(Checkpointer(*ts.store, trainable_only).Capture(3, reference.State()).ok());
  EXPECT_EQ(RecordsWithRole(*ts.store, 3, "buffer"), 0u);
  const auto at_capture = Fingerprint(reference.State());

  BatchNormLoop target(2);
  const auto before = Fingerprint(target.State());
  Checkpointer checkpointer(*ts.store);
  Status status = checkpointer.Restore(3, target.State());
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(status.message(),
            "restore step 3: buffer `1.running_mean`: in the target, absent from the snapshot (captured without "
            "buffers; RestoreOptions::allow_missing_buffers accepts that)");
  EXPECT_EQ(FirstDifference(before, Fingerprint(target.State())), "");

  RestoreOptions accept;
  accept.allow_missing_buffers = true;
  status = checkpointer.Restore(3, target.State(), accept);
  ASSERT_TRUE(status.ok()) << status.ToString();
  // Parameters, optimizer and RNG come from the snapshot; the buffers stay the target's own.
  const auto after = Fingerprint(target.State());
  for (const auto& [key, value] : after) {
    const bool buffer = key.find("#buffer") != std::string::npos;
    EXPECT_TRUE(capture_test::BitwiseEqual(value, buffer ? before.at(key) : at_capture.at(key))) << key;
  }
}

// --- AlreadyExists at CaptureAsync, and rollback ------------------------------

TEST(CheckpointerRollbackTest, CaptureOfAStoredStepFailsInCaptureAsync) {
  TempStore ts;
  Rig rig(Opt::kAdam);
  rig.MicroStep();
  Checkpointer checkpointer(*ts.store);
  ASSERT_TRUE(checkpointer.Capture(5, rig.State()).ok());
  const int64_t created = ts.store->Info(5).value().created_unix_ms;
  rig.MicroStep();
  auto again = checkpointer.CaptureAsync(5, rig.State());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(again.status().message(),
            "capture step 5: already stored (to train on from an earlier step, restore it with "
            "RestoreOptions::discard_later or RollbackTo)");
  // Like every capture error, it also counts once for Flush.
  EXPECT_EQ(checkpointer.Flush().code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(checkpointer.Flush().ok());
  EXPECT_EQ(checkpointer.Capture(5, rig.State()).code(), StatusCode::kAlreadyExists);
  (void)checkpointer.Flush();
  EXPECT_EQ(ts.store->Info(5).value().created_unix_ms, created);
  EXPECT_EQ(ts.store->List().value().size(), 1u);
}

std::vector<int64_t> StoredSteps(Store& store) {
  std::vector<int64_t> steps;
  Result<std::vector<SnapshotInfo>> list = store.List();
  EXPECT_TRUE(list.ok()) << list.status().ToString();
  for (const SnapshotInfo& info : list.value_or({})) steps.push_back(info.step);
  return steps;
}

TEST(CheckpointerRollbackTest, RollbackToDiscardsLaterSnapshotsAndTrainingOnCapturesThemAgain) {
  TempStore ts;
  Rig rig(Opt::kAdamW);
  Checkpointer checkpointer(*ts.store);
  std::map<int64_t, std::map<std::string, torch::Tensor>> at;
  for (int64_t step = 1; step <= 6; ++step) {
    rig.MicroStep();
    ASSERT_TRUE(checkpointer.Capture(step, rig.State()).ok());
    at[step] = Fingerprint(rig.State());
  }
  // A plain restore of step 3, then training on: the next capture is refused at once.
  ASSERT_TRUE(checkpointer.Restore(3, rig.State()).ok());
  rig.MicroStep();
  auto refused = checkpointer.CaptureAsync(4, rig.State());
  EXPECT_EQ(refused.status().code(), StatusCode::kAlreadyExists);
  (void)checkpointer.Flush();

  Status status = checkpointer.RollbackTo(3, rig.State());
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(StoredSteps(*ts.store), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(FirstDifference(at[3], Fingerprint(rig.State())), "");
  for (int64_t step = 4; step <= 6; ++step) {
    rig.MicroStep();
    ASSERT_TRUE(checkpointer.Capture(step, rig.State()).ok()) << step;
    EXPECT_EQ(FirstDifference(at[step], Fingerprint(rig.State())), "") << step;
  }
  EXPECT_EQ(StoredSteps(*ts.store), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));

  // RestoreOptions::discard_later is the same rollback.
  RestoreOptions rollback;
  rollback.discard_later = true;
  ASSERT_TRUE(checkpointer.Restore(5, rig.State(), rollback).ok());
  EXPECT_EQ(StoredSteps(*ts.store), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(FirstDifference(at[5], Fingerprint(rig.State())), "");
}

TEST(CheckpointerRollbackTest, FailedRollbackDeletesNothingAndChangesNothing) {
  TempStore ts;
  Rig rig(Opt::kAdam);
  Checkpointer checkpointer(*ts.store);
  for (int64_t step = 1; step <= 3; ++step) {
    rig.MicroStep();
    ASSERT_TRUE(checkpointer.Capture(step, rig.State()).ok());
  }
  const auto before = Fingerprint(rig.State());
  rig.cursor.refuse = true;  // the extra state refuses its bytes: the last check before the deletion
  Status status = checkpointer.RollbackTo(1, rig.State());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "restore step 1: extra state `cursor`: cursor refuses to load");
  EXPECT_EQ(StoredSteps(*ts.store), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(FirstDifference(before, Fingerprint(rig.State())), "");
  // A contract mismatch (another model) also deletes nothing.
  Rig other(Opt::kSgdMomentum);
  EXPECT_EQ(checkpointer.RollbackTo(1, other.State()).code(), StatusCode::kContractMismatch);
  EXPECT_EQ(StoredSteps(*ts.store), (std::vector<int64_t>{1, 2, 3}));
}

// The deletion of discard_later comes at the boundary between the restore's
// phases: once it fails (a read-only store), the extras the first phase
// loaded get their previous state back and no tensor was written.
TEST(CheckpointerRollbackTest, RollbackThatCannotDeleteUndoesTheExtrasAndWritesNothing) {
  TempStore ts;
  Rig rig(Opt::kAdam);
  {
    Checkpointer checkpointer(*ts.store);
    for (int64_t step = 1; step <= 3; ++step) {
      rig.MicroStep();
      ASSERT_TRUE(checkpointer.Capture(step, rig.State()).ok());
    }
  }
  ts.Close();
  Result<std::unique_ptr<Store>> read_only = Store::OpenReadOnly(ts.path().string());
  ASSERT_TRUE(read_only.ok()) << read_only.status().ToString();
  rig.MicroStep();
  const auto before = Fingerprint(rig.State());
  const int64_t cursor = rig.cursor.position;
  Checkpointer checkpointer(**read_only);
  Status status = checkpointer.RollbackTo(1, rig.State());
  EXPECT_EQ(status.code(), StatusCode::kNotSupported) << status.ToString();
  EXPECT_EQ(status.message().rfind("restore step 1: discard_later: ", 0), 0u) << status.message();
  EXPECT_EQ(rig.cursor.position, cursor);
  EXPECT_EQ(FirstDifference(before, Fingerprint(rig.State())), "");
  EXPECT_EQ(StoredSteps(**read_only), (std::vector<int64_t>{1, 2, 3}));
  // The same store restores without the deletion.
  ASSERT_TRUE(checkpointer.Restore(1, rig.State()).ok());
  EXPECT_EQ(rig.cursor.position, 1);
}

// --- CheckpointerOptions::gradients -------------------------------------------

// Gradient accumulation over windows of 2 that zeroes the gradients at the
// start of each window (as LibTorch's examples do): at a window boundary the
// previous window's gradients are still there, stale and non-zero.
struct AccumulatingLoop {
  explicit AccumulatingLoop(uint64_t seed, bool accumulate = true) : accumulate(accumulate) {
    torch::manual_seed(seed);
    model = torch::nn::Linear(6, 3);
    optimizer = std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-2));
    window.size = accumulate ? 2 : 1;
  }
  void MicroStep() {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(900 + cursor.position++);
    torch::Tensor x = torch::randn({5, 6}, gen), y = torch::randn({5, 3}, gen);
    if (window.micro_step == 0) optimizer->zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    if (++window.micro_step == window.size) {
      optimizer->step();
      window.micro_step = 0;
    }
  }
  TrainingState State() {
    TrainingState state;
    state.model = model.ptr().get();
    state.optimizer = optimizer.get();
    if (accumulate) state.accumulation = &window;
    state.extra["cursor"] = &cursor;
    return state;
  }
  bool accumulate;
  torch::nn::Linear model{nullptr};
  std::unique_ptr<torch::optim::Adam> optimizer;
  AccumulationWindow window;
  capture_test::Cursor cursor;
};

constexpr int64_t kGradSteps = 9;

std::map<std::string, torch::Tensor> ZeroedGradients(std::map<std::string, torch::Tensor> state) {
  for (auto& [key, value] : state) {
    if (key.size() > 5 && key.compare(key.size() - 5, 5, "#grad") == 0) value = torch::zeros_like(value);
  }
  return state;
}

// Captures micro-steps 4 (window boundary) and 5 (mid-window) with `option`,
// restores each into fresh objects and finishes the run: returns what the
// snapshot held and checks the outcome against an uninterrupted run.
void CheckGradientOption(Gradients option, bool accumulate, size_t expected_boundary_grads,
                         size_t expected_mid_grads) {
  SCOPED_TRACE(std::string("gradients option ") + std::to_string(static_cast<int>(option)) +
               (accumulate ? ", accumulating" : ", zero_grad every step"));
  TempStore ts;
  CheckpointerOptions options;
  options.gradients = option;
  Checkpointer checkpointer(*ts.store, options);
  AccumulatingLoop reference(1, accumulate);
  std::map<int64_t, std::map<std::string, torch::Tensor>> at;
  for (int64_t step = 1; step <= kGradSteps; ++step) {
    reference.MicroStep();
    at[step] = Fingerprint(reference.State());
    if (step == 4 || step == 5) {
      ASSERT_TRUE(checkpointer.Capture(step, reference.State()).ok());
    }
  }
  if (accumulate) {
    ASSERT_EQ(at[4].at("window").data_ptr<double>()[0], 0.0);  // 4: boundary, 5: mid-window
  }
  EXPECT_EQ(RecordsWithRole(*ts.store, 4, "grad"), expected_boundary_grads);
  EXPECT_EQ(RecordsWithRole(*ts.store, 5, "grad"), expected_mid_grads);

  for (int64_t step : {4, 5}) {
    SCOPED_TRACE("restored step " + std::to_string(step));
    AccumulatingLoop resumed(2, accumulate);
    resumed.MicroStep();  // gradients of its own, to be replaced
    ASSERT_TRUE(checkpointer.Restore(step, resumed.State()).ok());
    const size_t stored = step == 4 ? expected_boundary_grads : expected_mid_grads;
    // A stored gradient comes back as it was; an omitted one as zeros.
    EXPECT_EQ(FirstDifference(stored > 0 ? at[step] : ZeroedGradients(at[step]), Fingerprint(resumed.State())), "");
    while (resumed.cursor.position < kGradSteps) resumed.MicroStep();
    const bool pending_lost = stored == 0 && accumulate && step == 5;
    if (pending_lost) {
      // Gradients::kNever mid-window drops what the window accumulated: documented, and visible.
      EXPECT_NE(FirstDifference(at[kGradSteps], Fingerprint(resumed.State())), "");
    } else {
      EXPECT_EQ(FirstDifference(at[kGradSteps], Fingerprint(resumed.State())), "");
    }
  }
}

TEST(CheckpointerGradientsTest, AutoStoresThemMidWindowOnlyAndResumesBitExactly) {
  EXPECT_EQ(CheckpointerOptions().gradients, Gradients::kAuto);
  CheckGradientOption(Gradients::kAuto, /*accumulate=*/true, 0, 2);
  // No window given: kAuto stores them, as before the option existed.
  CheckGradientOption(Gradients::kAuto, /*accumulate=*/false, 2, 2);
}

TEST(CheckpointerGradientsTest, AlwaysStoresThemAndResumesBitExactly) {
  CheckGradientOption(Gradients::kAlways, /*accumulate=*/true, 2, 2);
}

TEST(CheckpointerGradientsTest, NeverStoresThemAndResumesBitExactlyWhenEveryStepZeroesThem) {
  CheckGradientOption(Gradients::kNever, /*accumulate=*/false, 0, 0);
  CheckGradientOption(Gradients::kNever, /*accumulate=*/true, 0, 0);
}

TEST(CheckpointerGradientsTest, RestoreGradientsFalseLeavesTheTargetsGradients) {
  TempStore ts;
  CheckpointerOptions never;
  never.gradients = Gradients::kNever;
  Checkpointer checkpointer(*ts.store, never);
  AccumulatingLoop reference(1);
  for (int i = 0; i < 3; ++i) reference.MicroStep();
  ASSERT_TRUE(checkpointer.Capture(3, reference.State()).ok());
  AccumulatingLoop target(2);
  target.MicroStep();
  const torch::Tensor own = target.model->weight.grad().clone();
  RestoreOptions keep;
  keep.restore_gradients = false;
  ASSERT_TRUE(checkpointer.Restore(3, target.State(), keep).ok());
  EXPECT_TRUE(capture_test::BitwiseEqual(target.model->weight.grad(), own));
  EXPECT_TRUE(capture_test::BitwiseEqual(target.model->weight, reference.model->weight));
}

}  // namespace
}  // namespace trainsnap
