// A second bit-exact resume workload: two models with two optimizers in one
// snapshot (a GAN's generator and discriminator with BatchNorm in training
// mode, as in LibTorch's DCGAN example), captured through
// TrainingState::models / ::optimizers with the Checkpointer's defaults.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "resume/lora_workload.h"
#include "trainsnap/checkpointer.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

// Steps of the GAN scenario's full run (one D and one G update per step).
constexpr int64_t kGanSteps = 60;

class GanRun {
 public:
  // init_seed initialises both networks (fresh objects use another one).
  explicit GanRun(uint64_t init_seed);

  TrainingState State();
  // One step (index cursor().position()): a discriminator update on real
  // data (from the cursor) and generated data (noise from the default
  // generator, so the RNG matters), then a generator update.
  Status MicroStep();

  const DataCursor& cursor() const { return cursor_; }
  const std::vector<std::pair<int64_t, double>>& losses() const { return losses_; }
  torch::nn::Sequential& generator() { return generator_; }
  torch::nn::Sequential& discriminator() { return discriminator_; }
  torch::optim::Adam& generator_optimizer() { return *g_optimizer_; }
  torch::optim::Adam& discriminator_optimizer() { return *d_optimizer_; }

 private:
  torch::nn::Sequential generator_, discriminator_;
  std::unique_ptr<torch::optim::Adam> g_optimizer_, d_optimizer_;
  DataCursor cursor_;
  std::vector<std::pair<int64_t, double>> losses_;  // generator loss per step
};

// Both models' parameters, gradients and buffers, both optimizers' state and
// options, the cursor and the RNG, as named tensors (see CollectTrainingState).
NamedTensors CollectGanState(GanRun& run);

}  // namespace trainsnap::internal
