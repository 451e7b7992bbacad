#include "resume/lora_workload.h"

#include <cmath>
#include <cstring>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>

namespace trainsnap::internal {
namespace {

// The model's input, hidden and output width, and its adapters' rank.
constexpr int64_t kWidth = 32;
constexpr int64_t kRank = 4;
constexpr int64_t kBatchSize = 16;
// StepLR: decay every 8 optimizer steps, so 40 steps cross 5 decays.
constexpr int64_t kLrStepSize = 8;
constexpr double kLrGamma = 0.7;
// Mixes the position into the data seed (the 64-bit golden ratio, as in
// splitmix64) so neighbouring batches use unrelated generator states.
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

at::Generator SeededGenerator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// Reads LRScheduler's protected step count without changing the class.
struct SchedulerStepCount : torch::optim::LRScheduler {
  static unsigned Get(const torch::optim::LRScheduler& s) { return s.*(&SchedulerStepCount::step_count_); }
};

torch::Tensor Int64(int64_t v) { return torch::scalar_tensor(v, torch::kInt64); }
torch::Tensor Float64(double v) { return torch::scalar_tensor(v, torch::kFloat64); }

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(OptimizerKind kind, std::vector<torch::Tensor> a_params,
                                                       std::vector<torch::Tensor> b_params) {
  using namespace torch::optim;  // NOLINT: the option types only
  // Two param groups with different learning rates: the A and the B adapters.
  auto groups = [&](const OptimizerOptions& base) {
    std::vector<OptimizerParamGroup> g;
    g.emplace_back(std::move(a_params), base.clone());
    auto b_options = base.clone();
    b_options->set_lr(base.get_lr() * 2.0);
    g.emplace_back(std::move(b_params), std::move(b_options));
    return g;
  };
  switch (kind) {
    case OptimizerKind::kAdamW:
      return std::make_unique<AdamW>(groups(AdamWOptions(1e-2).weight_decay(0.05)));
    case OptimizerKind::kSgdMomentum:
      return std::make_unique<SGD>(
          groups(SGDOptions(5e-2).momentum(0.9).dampening(0.1).weight_decay(1e-3)), SGDOptions(5e-2));
    case OptimizerKind::kAdamAmsgrad:
      return std::make_unique<Adam>(groups(AdamOptions(1e-2).amsgrad(true).weight_decay(1e-3)));
    case OptimizerKind::kRmsProp:
      return std::make_unique<RMSprop>(groups(RMSpropOptions(1e-3).alpha(0.95).centered(true).momentum(0.9)));
    case OptimizerKind::kAdagrad:
      return std::make_unique<Adagrad>(
          groups(AdagradOptions(5e-2).lr_decay(1e-2).initial_accumulator_value(0.1)));
  }
  return nullptr;
}

template <class AdamOptionsT>
std::vector<double> AdamOptionValues(const AdamOptionsT& a) {
  return {a.lr(), std::get<0>(a.betas()), std::get<1>(a.betas()), a.eps(), a.weight_decay(), a.amsgrad() ? 1.0 : 0.0};
}

// Every option of a param group, in a fixed order.
std::vector<double> OptionValues(OptimizerKind kind, const torch::optim::OptimizerOptions& o) {
  using namespace torch::optim;  // NOLINT: the option types only
  switch (kind) {
    case OptimizerKind::kAdamW: return AdamOptionValues(static_cast<const AdamWOptions&>(o));
    case OptimizerKind::kAdamAmsgrad: return AdamOptionValues(static_cast<const AdamOptions&>(o));
    case OptimizerKind::kSgdMomentum: {
      const auto& s = static_cast<const SGDOptions&>(o);
      return {s.lr(), s.momentum(), s.dampening(), s.weight_decay(), s.nesterov() ? 1.0 : 0.0};
    }
    case OptimizerKind::kRmsProp: {
      const auto& r = static_cast<const RMSpropOptions&>(o);
      return {r.lr(), r.alpha(), r.eps(), r.weight_decay(), r.momentum(), r.centered() ? 1.0 : 0.0};
    }
    case OptimizerKind::kAdagrad: {
      const auto& a = static_cast<const AdagradOptions&>(o);
      return {a.lr(), a.lr_decay(), a.weight_decay(), a.initial_accumulator_value(), a.eps()};
    }
  }
  return {};
}

template <class AdamStateT, class Add>
void AppendAdamState(const AdamStateT& a, const Add& add) {
  add("step", Int64(a.step()));
  add("exp_avg", a.exp_avg());
  add("exp_avg_sq", a.exp_avg_sq());
  add("max_exp_avg_sq", a.max_exp_avg_sq());
}

// Appends every state tensor and counter of one parameter's optimizer state.
void AppendParamState(OptimizerKind kind, const std::string& name, const torch::optim::OptimizerParamState& s,
                      NamedTensors& out) {
  using namespace torch::optim;  // NOLINT: the state types only
  auto add = [&](const char* role, const torch::Tensor& t) {
    out.emplace_back("optim/" + name + "/" + role, t.defined() ? t.detach().clone() : torch::Tensor());
  };
  switch (kind) {
    case OptimizerKind::kAdamW: return AppendAdamState(static_cast<const AdamWParamState&>(s), add);
    case OptimizerKind::kAdamAmsgrad: return AppendAdamState(static_cast<const AdamParamState&>(s), add);
    case OptimizerKind::kSgdMomentum:
      add("momentum_buffer", static_cast<const SGDParamState&>(s).momentum_buffer());
      return;
    case OptimizerKind::kRmsProp: {
      const auto& r = static_cast<const RMSpropParamState&>(s);
      add("step", Int64(r.step()));
      add("square_avg", r.square_avg());
      add("momentum_buffer", r.momentum_buffer());
      add("grad_avg", r.grad_avg());
      return;
    }
    case OptimizerKind::kAdagrad: {
      const auto& a = static_cast<const AdagradParamState&>(s);
      add("step", Int64(a.step()));
      add("sum", a.sum());
      return;
    }
  }
}

}  // namespace

std::string_view OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdamW: return "adamw";
    case OptimizerKind::kSgdMomentum: return "sgd_momentum";
    case OptimizerKind::kAdamAmsgrad: return "adam_amsgrad";
    case OptimizerKind::kRmsProp: return "rmsprop";
    case OptimizerKind::kAdagrad: return "adagrad";
  }
  return "unknown";
}

std::vector<OptimizerKind> AllOptimizerKinds() {
  return {OptimizerKind::kAdamW, OptimizerKind::kSgdMomentum, OptimizerKind::kAdamAmsgrad, OptimizerKind::kRmsProp,
          OptimizerKind::kAdagrad};
}

Result<OptimizerKind> ParseOptimizerKind(std::string_view name) {
  for (OptimizerKind kind : AllOptimizerKinds()) {
    if (OptimizerKindName(kind) == name) return kind;
  }
  return Status::InvalidArgument("unknown optimizer `" + std::string(name) + "`");
}

std::string DataCursor::SaveState() const {
  std::string bytes(sizeof(position_), '\0');
  std::memcpy(bytes.data(), &position_, sizeof(position_));
  return bytes;
}

Status DataCursor::LoadState(std::string_view bytes) {
  if (bytes.size() != sizeof(position_)) {
    return Status::Corruption("data cursor state: expected " + std::to_string(sizeof(position_)) + " bytes, got " +
                              std::to_string(bytes.size()));
  }
  std::memcpy(&position_, bytes.data(), sizeof(position_));
  return Status::OK();
}

Batch MakeBatch(int64_t position) {
  at::Generator gen = SeededGenerator(kDataSeed + static_cast<uint64_t>(position) * kGolden);
  Batch batch;
  batch.x = torch::randn({kBatchSize, kWidth}, gen);
  batch.y = torch::tanh(batch.x * 1.5) + torch::randn({kBatchSize, kWidth}, gen) * 0.05;
  batch.weight = 1.0 + static_cast<double>((position * 7) % 5);
  return batch;
}

LoraRun::LoraRun(OptimizerKind kind, uint64_t adapter_seed)
    : kind_(kind), model_(kWidth, kRank, capture_test::LoraSeeds{kBaseSeed, adapter_seed}) {
  std::vector<torch::Tensor> a_params, b_params;
  for (const auto& item : model_->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    (item.key().find("lora_a") != std::string::npos ? a_params : b_params).push_back(item.value());
  }
  optimizer_ = MakeOptimizer(kind, std::move(a_params), std::move(b_params));
  scheduler_ = std::make_unique<torch::optim::StepLR>(*optimizer_, kLrStepSize, kLrGamma);
  window_.size = kWindowSize;
}

TrainingState LoraRun::State() {
  TrainingState state;
  state.model = model_.ptr().get();
  state.optimizer = optimizer_.get();
  state.scheduler = scheduler_.get();
  state.accumulation = &window_;
  state.rng = true;
  state.extra["data_cursor"] = &cursor_;
  return state;
}

Status LoraRun::MicroStep() {
  const int64_t index = cursor_.position();
  try {
    if (window_.micro_step == 0) {
      // A new window: clear the previous window's gradients, pick its loss
      // scale (varies per window, like a dynamic loss scaler).
      optimizer_->zero_grad();
      window_.weight_sum = 0.0;
      window_.scale = std::ldexp(1.0, static_cast<int>(4 + (index / kWindowSize) % 4));
    }
    Batch batch = MakeBatch(index);
    model_->train();
    torch::Tensor loss = torch::mse_loss(model_->forward(batch.x), batch.y);
    (loss * (batch.weight * window_.scale)).backward();
    losses_.emplace_back(index, loss.item<double>());
    window_.weight_sum += batch.weight;
    ++window_.micro_step;
    cursor_.Advance();
    if (window_.micro_step == window_.size) {
      {
        // Weighted mean over the window: divide by the running weight sum
        // (restored state, not recomputed) and undo the loss scale.
        torch::NoGradGuard no_grad;
        for (auto& group : optimizer_->param_groups()) {
          for (auto& p : group.params()) {
            if (p.grad().defined()) p.mutable_grad().div_(window_.weight_sum * window_.scale);
          }
        }
      }
      optimizer_->step();
      scheduler_->step();
      window_.micro_step = 0;
    }
  } catch (const std::exception& e) {
    return Status::Aborted("micro-step " + std::to_string(index) + ": " + e.what());
  }
  return Status::OK();
}

NamedTensors CollectTrainingState(LoraRun& run) {
  NamedTensors out;
  const auto& state = run.optimizer().state();
  for (const auto& item : run.model()->named_parameters()) {
    const std::string& name = item.key();
    const torch::Tensor& p = item.value();
    out.emplace_back("param/" + name, p.detach().clone());
    if (!p.requires_grad()) continue;
    out.emplace_back("grad/" + name, p.grad().defined() ? p.grad().detach().clone() : torch::Tensor());
    auto it = state.find(c10::guts::to_string(p.unsafeGetTensorImpl()));
    out.emplace_back("optim/" + name + "/present", Int64(it != state.end() ? 1 : 0));
    if (it != state.end()) AppendParamState(run.kind(), name, *it->second, out);
  }
  const auto& groups = run.optimizer().param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    out.emplace_back("group/" + std::to_string(i) + "/options",
                     torch::tensor(OptionValues(run.kind(), groups[i].options()), torch::kFloat64));
    out.emplace_back("group/" + std::to_string(i) + "/params", Int64(static_cast<int64_t>(groups[i].params().size())));
  }
  out.emplace_back("scheduler/step_count", Int64(SchedulerStepCount::Get(run.scheduler())));
  out.emplace_back("window/micro_step", Int64(run.window().micro_step));
  out.emplace_back("window/size", Int64(run.window().size));
  out.emplace_back("window/weight_sum", Float64(run.window().weight_sum));
  out.emplace_back("window/scale", Float64(run.window().scale));
  out.emplace_back("cursor/position", Int64(run.cursor().position()));
  {
    at::Generator gen = at::detail::getDefaultCPUGenerator();  // shares the generator
    std::lock_guard<std::mutex> lock(gen.mutex());
    out.emplace_back("rng/cpu", gen.get_state());
  }
  return out;
}

bool BitwiseEqual(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  torch::Tensor ca = a.contiguous().cpu(), cb = b.contiguous().cpu();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

}  // namespace trainsnap::internal
