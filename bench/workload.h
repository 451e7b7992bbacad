// Training workloads for trainsnap_bench: a transformer-like stack of Linear
// layers, its AdamW optimizer, and one real optimizer step on synthetic data.
// Two workloads built from the same config and seed are bitwise identical.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace trainsnap::bench {

enum class WorkloadKind {
  kLora,   // frozen fp32 base, rank-r adapters on every Linear
  kDense,  // every fp32 parameter trainable
  kBf16,   // every bf16 parameter trainable
};

// "lora", "dense", "bf16".
std::string WorkloadKindName(WorkloadKind kind);

struct WorkloadConfig {
  WorkloadKind kind = WorkloadKind::kDense;
  // Model width d. Each block holds six Linear layers (q, k, v, o: d x d;
  // up: d -> 4d; down: 4d -> d), i.e. about 12 d^2 parameters.
  int64_t width = 512;
  int64_t blocks = 8;
  int64_t lora_rank = 16;  // kLora only
  int64_t batch = 8;       // rows of synthetic input per step
  double lr = 1e-5;        // AdamW learning rate
  double weight_decay = 0.01;
  uint64_t data_seed = 7;  // synthetic batches are a function of (data_seed, step)
};

// One model + optimizer. Not thread-safe. Step() throws c10::Error on a
// LibTorch failure; the harness catches it at main().
class Workload {
 public:
  // Parameters are drawn from a private generator seeded with `init_seed`.
  static std::unique_ptr<Workload> Create(const WorkloadConfig& config, uint64_t init_seed);

  const WorkloadConfig& config() const { return config_; }
  torch::nn::Module& model() { return *model_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }

  // Forward, backward and optimizer step on the batch of `step`, then zero_grad.
  void Step(int64_t step);

  // Overwrites every trainable parameter with fresh random values, so that a
  // restore into this object has to rewrite them (the frozen base is kept).
  void ScrambleTrainable(uint64_t seed);

  int64_t trainable_params() const { return trainable_params_; }
  int64_t frozen_params() const { return frozen_params_; }

  // Every tensor a full snapshot holds, as (name, tensor): the module's
  // parameters and buffers ("model.<name>"; frozen ones only if `with_frozen`)
  // then every optimizer state tensor ("optim.<i>.<field>", i = position of
  // the parameter in the param groups). Views of the live tensors, except
  // the AdamW step counter (an int64 in LibTorch), returned as a new 0-dim tensor.
  std::vector<std::pair<std::string, torch::Tensor>> StateTensors(bool with_frozen);

 private:
  Workload() = default;

  WorkloadConfig config_;
  std::shared_ptr<torch::nn::Module> model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::function<torch::Tensor(const torch::Tensor&)> forward_;
  int64_t trainable_params_ = 0;
  int64_t frozen_params_ = 0;
};

}  // namespace trainsnap::bench
