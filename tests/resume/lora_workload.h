// The training workload of the bit-exact resume scenario: the test kit's LoRA
// model (testing/lora_net.h: frozen base + trainable low-rank adapters, with
// dropout; its base seeded alike in every run, its adapters per run), a data
// cursor whose batches depend only on its position, weighted gradient accumulation
// and an optimizer with a StepLR scheduler. Shared by the test and by the
// child process that the test SIGKILLs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "testing/lora_net.h"
#include "trainsnap/checkpointer.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

// Micro-steps per optimizer step.
constexpr int64_t kWindowSize = 4;
// Optimizer steps of the scenario's full run.
constexpr int64_t kOptimizerSteps = 40;
constexpr int64_t kTotalMicroSteps = kOptimizerSteps * kWindowSize;
// Seeds. The base seed is shared by every run (the frozen base is not stored
// in a trainable-only snapshot, it must be rebuilt identically); the training
// seeds differ between the reference and the fresh objects of a resume, so a
// resume that forgot anything cannot match by luck.
constexpr uint64_t kBaseSeed = 1234;
constexpr uint64_t kDataSeed = 0x5eed'da7a;
constexpr uint64_t kTrainSeed = 42;
constexpr uint64_t kFreshSeed = 977;

enum class OptimizerKind {
  kAdamW,         // AdamW (weight decay) + StepLR
  kSgdMomentum,   // SGD with momentum and weight decay
  kAdamAmsgrad,   // Adam with amsgrad (max_exp_avg_sq)
  kRmsProp,       // RMSprop, centered, with momentum
  kAdagrad,       // Adagrad with lr decay and an initial accumulator
};

std::string_view OptimizerKindName(OptimizerKind kind);
Result<OptimizerKind> ParseOptimizerKind(std::string_view name);
std::vector<OptimizerKind> AllOptimizerKinds();

// Data-loader cursor: the number of batches consumed. Batch i is a pure
// function of i (its own generator), so the default generator only drives dropout.
class DataCursor : public Stateful {
 public:
  int64_t position() const { return position_; }
  void Advance() { ++position_; }
  std::string SaveState() const override;
  Status LoadState(std::string_view bytes) override;

 private:
  int64_t position_ = 0;
};

struct Batch {
  torch::Tensor x, y;
  double weight = 1.0;  // e.g. the number of valid tokens of the batch
};
Batch MakeBatch(int64_t position);

// One complete set of live training objects.
class LoraRun {
 public:
  // adapter_seed initialises the adapters (a fresh run to be restored into
  // uses a different one from the reference).
  LoraRun(OptimizerKind kind, uint64_t adapter_seed);

  // The view the Checkpointer captures and restores.
  TrainingState State();
  // Runs the next micro-step (index cursor().position()); steps the optimizer
  // and the scheduler when it completes a window. The loss goes to losses().
  Status MicroStep();

  capture_test::LoraNet& model() { return model_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  torch::optim::StepLR& scheduler() { return *scheduler_; }
  const DataCursor& cursor() const { return cursor_; }
  const AccumulationWindow& window() const { return window_; }
  AccumulationWindow& mutable_window() { return window_; }
  OptimizerKind kind() const { return kind_; }
  // Loss of every micro-step this object ran, by micro-step index.
  const std::vector<std::pair<int64_t, double>>& losses() const { return losses_; }

 private:
  OptimizerKind kind_;
  capture_test::LoraNet model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<torch::optim::StepLR> scheduler_;
  DataCursor cursor_;
  AccumulationWindow window_;
  std::vector<std::pair<int64_t, double>> losses_;
};

// Everything that defines where training stands, flattened to named CPU
// tensors (scalars as 0-dim int64/float64 tensors): every parameter (frozen
// ones too), every gradient, every optimizer state tensor and counter, every
// param group option, the scheduler's step count, the window, the cursor and
// the default CPU generator's state bytes.
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
NamedTensors CollectTrainingState(LoraRun& run);

// True when both tensors are undefined, or have the same dtype, shape and
// bytes (stricter than torch::equal: -0.0 vs 0.0 and NaN payloads count).
bool BitwiseEqual(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace trainsnap::internal
