#include "resume/gan_workload.h"

#include <mutex>
#include <string>

#include <ATen/CPUGeneratorImpl.h>

namespace trainsnap::internal {
namespace {

constexpr int64_t kNoise = 8;
constexpr int64_t kData = 16;
constexpr int64_t kHidden = 32;
constexpr int64_t kBatch = 16;

// Re-draws every parameter from a generator seeded with `seed`, so that two
// runs built with the same seed start identical without touching the
// default generator.
void Initialise(torch::nn::Module& module, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) p.copy_(torch::randn(p.sizes(), gen) * 0.2);
}

torch::Tensor Int64(int64_t v) { return torch::scalar_tensor(v, torch::kInt64); }

void AppendModel(const std::string& prefix, torch::nn::Module& model, torch::optim::Adam& optimizer,
                 NamedTensors& out) {
  const auto& state = optimizer.state();
  for (const auto& item : model.named_parameters()) {
    const std::string name = prefix + "." + item.key();
    const torch::Tensor& p = item.value();
    out.emplace_back("param/" + name, p.detach().clone());
    out.emplace_back("grad/" + name, p.grad().defined() ? p.grad().clone() : torch::Tensor());
    auto it = state.find(c10::guts::to_string(p.unsafeGetTensorImpl()));
    out.emplace_back("optim/" + name + "/present", Int64(it != state.end() ? 1 : 0));
    if (it == state.end()) continue;
    const auto& s = static_cast<const torch::optim::AdamParamState&>(*it->second);
    out.emplace_back("optim/" + name + "/step", Int64(s.step()));
    out.emplace_back("optim/" + name + "/exp_avg", s.exp_avg().clone());
    out.emplace_back("optim/" + name + "/exp_avg_sq", s.exp_avg_sq().clone());
  }
  // BatchNorm's running statistics and batch counter: training-mode forward
  // passes update them, so a resume that lost them diverges.
  for (const auto& item : model.named_buffers()) {
    out.emplace_back("buffer/" + prefix + "." + item.key(), item.value().clone());
  }
  const auto& o = static_cast<const torch::optim::AdamOptions&>(optimizer.param_groups()[0].options());
  out.emplace_back("group/" + prefix,
                   torch::tensor({o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(), o.weight_decay()},
                                 torch::kFloat64));
}

}  // namespace

GanRun::GanRun(uint64_t init_seed)
    : generator_(torch::nn::Linear(kNoise, kHidden), torch::nn::BatchNorm1d(kHidden), torch::nn::ReLU(),
                 torch::nn::Linear(kHidden, kData)),
      discriminator_(torch::nn::Linear(kData, kHidden), torch::nn::BatchNorm1d(kHidden), torch::nn::LeakyReLU(),
                     torch::nn::Dropout(0.2), torch::nn::Linear(kHidden, 1)) {
  Initialise(*generator_, init_seed);
  Initialise(*discriminator_, init_seed + 1);
  // DCGAN's settings: Adam, lr 2e-4, betas (0.5, 0.999).
  g_optimizer_ = std::make_unique<torch::optim::Adam>(generator_->parameters(),
                                                      torch::optim::AdamOptions(2e-3).betas({0.5, 0.999}));
  d_optimizer_ = std::make_unique<torch::optim::Adam>(discriminator_->parameters(),
                                                      torch::optim::AdamOptions(1e-3).betas({0.5, 0.999}));
}

TrainingState GanRun::State() {
  TrainingState state;
  state.models["generator"] = generator_.ptr().get();
  state.models["discriminator"] = discriminator_.ptr().get();
  state.optimizers["generator"] = g_optimizer_.get();
  state.optimizers["discriminator"] = d_optimizer_.get();
  state.extra["data_cursor"] = &cursor_;
  return state;
}

Status GanRun::MicroStep() {
  const int64_t index = cursor_.position();
  try {
    torch::Tensor real = MakeBatch(index).x.narrow(1, 0, kData);
    torch::Tensor noise = torch::randn({kBatch, kNoise});
    generator_->train();
    discriminator_->train();

    d_optimizer_->zero_grad();
    torch::Tensor fake = generator_->forward(noise);
    torch::Tensor d_loss =
        torch::binary_cross_entropy_with_logits(discriminator_->forward(real), torch::ones({kBatch, 1})) +
        torch::binary_cross_entropy_with_logits(discriminator_->forward(fake.detach()), torch::zeros({kBatch, 1}));
    d_loss.backward();
    d_optimizer_->step();

    // The generator update also leaves gradients in the discriminator: they
    // are pending state that the snapshot must carry.
    g_optimizer_->zero_grad();
    torch::Tensor g_loss =
        torch::binary_cross_entropy_with_logits(discriminator_->forward(fake), torch::ones({kBatch, 1}));
    g_loss.backward();
    g_optimizer_->step();
    losses_.emplace_back(index, g_loss.item<double>());
    cursor_.Advance();
  } catch (const std::exception& e) {
    return Status::Aborted("gan step " + std::to_string(index) + ": " + e.what());
  }
  return Status::OK();
}

NamedTensors CollectGanState(GanRun& run) {
  NamedTensors out;
  AppendModel("generator", *run.generator(), run.generator_optimizer(), out);
  AppendModel("discriminator", *run.discriminator(), run.discriminator_optimizer(), out);
  out.emplace_back("cursor/position", Int64(run.cursor().position()));
  at::Generator gen = at::detail::getDefaultCPUGenerator();  // shares the generator
  std::lock_guard<std::mutex> lock(gen.mutex());
  out.emplace_back("rng/cpu", gen.get_state());
  return out;
}

}  // namespace trainsnap::internal
