#include "workload.h"

#include <cmath>

#include <ATen/CPUGeneratorImpl.h>

namespace trainsnap::bench {
namespace {

// A Linear layer with an optional low-rank adapter: y = x W^T + b + s * (x A^T) B^T.
// B starts at zero (the usual LoRA init), so the adapted model starts as the base.
class AdaptedLinearImpl : public torch::nn::Module {
 public:
  AdaptedLinearImpl(int64_t in, int64_t out, int64_t rank, bool freeze_base, torch::Dtype dtype,
                    at::Generator& gen) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    auto init = [&](std::vector<int64_t> shape) {
      return (torch::rand(shape, gen, torch::kFloat32) * (2 * bound) - bound).to(dtype);
    };
    weight_ = register_parameter("weight", init({out, in}), !freeze_base);
    bias_ = register_parameter("bias", init({out}), !freeze_base);
    if (rank > 0) {
      lora_a_ = register_parameter("lora_a", init({rank, in}));
      lora_b_ = register_parameter("lora_b", torch::zeros({out, rank}, torch::dtype(dtype)));
      scale_ = 2.0;  // alpha / rank with alpha = 2 * rank, a common choice
    }
  }

  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::nn::functional::linear(x, weight_, bias_);
    if (lora_a_.defined()) {
      y = y + scale_ * torch::nn::functional::linear(torch::nn::functional::linear(x, lora_a_), lora_b_);
    }
    return y;
  }

 private:
  torch::Tensor weight_, bias_, lora_a_, lora_b_;
  double scale_ = 0.0;
};
TORCH_MODULE(AdaptedLinear);

// A transformer-shaped block without attention over a sequence: a gated mix
// of q/k/v projections, an output projection and a 4x MLP, with residuals
// and parameter-free layer norms (so all parameters are Linear weights).
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int64_t d, int64_t rank, bool freeze_base, torch::Dtype dtype, at::Generator& gen) : d_(d) {
    q_ = register_module("q", AdaptedLinear(d, d, rank, freeze_base, dtype, gen));
    k_ = register_module("k", AdaptedLinear(d, d, rank, freeze_base, dtype, gen));
    v_ = register_module("v", AdaptedLinear(d, d, rank, freeze_base, dtype, gen));
    o_ = register_module("o", AdaptedLinear(d, d, rank, freeze_base, dtype, gen));
    up_ = register_module("up", AdaptedLinear(d, 4 * d, rank, freeze_base, dtype, gen));
    down_ = register_module("down", AdaptedLinear(4 * d, d, rank, freeze_base, dtype, gen));
  }

  torch::Tensor forward(torch::Tensor h) {
    auto x = torch::layer_norm(h, {d_});
    auto a = q_->forward(x) * torch::sigmoid(k_->forward(x)) + v_->forward(x);
    h = h + o_->forward(a);
    x = torch::layer_norm(h, {d_});
    return h + down_->forward(torch::gelu(up_->forward(x)));
  }

 private:
  int64_t d_;
  AdaptedLinear q_{nullptr}, k_{nullptr}, v_{nullptr}, o_{nullptr}, up_{nullptr}, down_{nullptr};
};
TORCH_MODULE(Block);

class StackImpl : public torch::nn::Module {
 public:
  StackImpl(int64_t d, int64_t blocks, int64_t rank, bool freeze_base, torch::Dtype dtype, at::Generator& gen) {
    for (int64_t i = 0; i < blocks; ++i) {
      blocks_.push_back(register_module("block" + std::to_string(i), Block(d, rank, freeze_base, dtype, gen)));
    }
  }
  torch::Tensor forward(torch::Tensor h) {
    for (auto& block : blocks_) h = block->forward(h);
    return h;
  }

 private:
  std::vector<Block> blocks_;
};
TORCH_MODULE(Stack);

at::Generator MakeGenerator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

}  // namespace

std::string WorkloadKindName(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kLora: return "lora";
    case WorkloadKind::kDense: return "dense";
    case WorkloadKind::kBf16: return "bf16";
  }
  return "unknown";
}

std::unique_ptr<Workload> Workload::Create(const WorkloadConfig& config, uint64_t init_seed) {
  std::unique_ptr<Workload> w(new Workload());
  w->config_ = config;
  const bool lora = config.kind == WorkloadKind::kLora;
  const torch::Dtype dtype = config.kind == WorkloadKind::kBf16 ? torch::kBFloat16 : torch::kFloat32;
  at::Generator gen = MakeGenerator(init_seed);
  Stack stack(config.width, config.blocks, lora ? config.lora_rank : 0, /*freeze_base=*/lora, dtype, gen);
  w->model_ = stack.ptr();
  w->forward_ = [stack](const torch::Tensor& x) mutable { return stack->forward(x); };

  std::vector<torch::Tensor> trainable;
  for (const auto& p : w->model_->parameters()) {
    if (p.requires_grad()) {
      trainable.push_back(p);
      w->trainable_params_ += p.numel();
    } else {
      w->frozen_params_ += p.numel();
    }
  }
  // LibTorch 1.13's AdamW creates exp_avg / exp_avg_sq with zeros_like(param):
  // for bf16 parameters the optimizer state is bf16 too (no fp32 master copy).
  w->optimizer_ = std::make_unique<torch::optim::AdamW>(
      trainable, torch::optim::AdamWOptions(config.lr).weight_decay(config.weight_decay));
  return w;
}

void Workload::Step(int64_t step) {
  const torch::Dtype dtype = config_.kind == WorkloadKind::kBf16 ? torch::kBFloat16 : torch::kFloat32;
  at::Generator gen = MakeGenerator(config_.data_seed * 1000003u + static_cast<uint64_t>(step));
  auto x = torch::randn({config_.batch, config_.width}, gen, torch::kFloat32).to(dtype);
  auto target = torch::randn({config_.batch, config_.width}, gen, torch::kFloat32);
  auto loss = torch::mse_loss(forward_(x).to(torch::kFloat32), target);
  loss.backward();
  optimizer_->step();
  optimizer_->zero_grad();
}

void Workload::ScrambleTrainable(uint64_t seed) {
  at::Generator gen = MakeGenerator(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : model_->parameters()) {
    if (p.requires_grad()) p.copy_(torch::randn(p.sizes(), gen, torch::kFloat32).to(p.scalar_type()));
  }
}

std::vector<std::pair<std::string, torch::Tensor>> Workload::StateTensors(bool with_frozen) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : model_->named_parameters()) {
    if (with_frozen || item.value().requires_grad()) out.emplace_back("model." + item.key(), item.value());
  }
  for (const auto& item : model_->named_buffers()) {
    if (with_frozen) out.emplace_back("model." + item.key(), item.value());
  }
  int64_t index = 0;
  for (const auto& group : optimizer_->param_groups()) {
    for (const auto& p : group.params()) {
      const std::string prefix = "optim." + std::to_string(index++) + ".";
      auto it = optimizer_->state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
      if (it == optimizer_->state().end()) continue;
      auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
      out.emplace_back(prefix + "step", torch::tensor(s.step(), torch::kInt64));
      out.emplace_back(prefix + "exp_avg", s.exp_avg());
      out.emplace_back(prefix + "exp_avg_sq", s.exp_avg_sq());
      if (s.max_exp_avg_sq().defined()) out.emplace_back(prefix + "max_exp_avg_sq", s.max_exp_avg_sq());
    }
  }
  return out;
}

}  // namespace trainsnap::bench
