// The test kit's LoRA model: frozen Linear bases with trainable low-rank
// adapters, and dropout between the layers. Used by the training rig
// (training_rig.h) and by the bit-exact resume workload. Header-only, no
// GoogleTest: the resume test's child process links it too.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

namespace trainsnap::capture_test {

// Seeds of a LoRA model whose values come from generators of its own rather
// than the default one: the frozen base from `base`, the adapters from
// `adapters` (layer i of a LoraNet uses base + i and adapters + i). The
// resume scenario rebuilds the base identically (a trainable-only snapshot
// does not hold it) and the adapters differently.
struct LoraSeeds {
  uint64_t base = 0;
  uint64_t adapters = 0;
};

// y = base(x) + B(A(x)); the base Linear is frozen. Without seeds every value
// is drawn from the default generator (torch::manual_seed decides them). With
// seeds the values come from the seeds alone (the Linear's own
// initialisation, overwritten, still advances the default generator).
class LoraLinearImpl : public torch::nn::Module {
 public:
  LoraLinearImpl(int64_t in, int64_t out, int64_t rank, std::optional<LoraSeeds> seeds = std::nullopt) {
    base = register_module("base", torch::nn::Linear(in, out));
    for (auto& p : base->parameters()) p.set_requires_grad(false);
    c10::optional<at::Generator> adapter_gen;  // none: the default generator
    if (seeds.has_value()) {
      at::Generator base_gen = at::make_generator<at::CPUGeneratorImpl>(seeds->base);
      torch::NoGradGuard no_grad;
      base->weight.copy_(torch::randn({out, in}, base_gen) / std::sqrt(static_cast<double>(in)));
      base->bias.copy_(torch::randn({out}, base_gen) * 0.1);
      adapter_gen = at::make_generator<at::CPUGeneratorImpl>(seeds->adapters);
    }
    lora_a = register_parameter("lora_a", torch::randn({rank, in}, adapter_gen) * 0.1);
    lora_b = register_parameter("lora_b", torch::randn({out, rank}, adapter_gen) * 0.1);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return base->forward(x) + torch::matmul(torch::matmul(x, lora_a.t()), lora_b.t());
  }
  torch::nn::Linear base{nullptr};
  torch::Tensor lora_a, lora_b;
};
TORCH_MODULE(LoraLinear);

// Two square LoraLinear layers (l1, l2) with ReLU and dropout (p = 0.25, in
// training mode) between them: the dropout masks make the default
// generator's state part of what a resume must restore.
class LoraNetImpl : public torch::nn::Module {
 public:
  explicit LoraNetImpl(int64_t width = 16, int64_t rank = 4, std::optional<LoraSeeds> seeds = std::nullopt) {
    l1 = register_module("l1", LoraLinear(width, width, rank, seeds));
    if (seeds.has_value()) seeds = LoraSeeds{seeds->base + 1, seeds->adapters + 1};
    l2 = register_module("l2", LoraLinear(width, width, rank, seeds));
    dropout = register_module("dropout", torch::nn::Dropout(0.25));
  }
  torch::Tensor forward(torch::Tensor x) { return l2->forward(dropout->forward(torch::relu(l1->forward(x)))); }
  LoraLinear l1{nullptr}, l2{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(LoraNet);

}  // namespace trainsnap::capture_test
