// The test kit's training rig (tests of capture, restore and the
// Checkpointer): the kit's LoRA model (lora_net.h), every supported
// optimizer, a training loop with weighted accumulation, and a bitwise
// fingerprint of the whole training state. Header-only; namespace
// trainsnap::capture_test keeps it apart from other tests in the binary.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/lora_net.h"
#include "testing/store_fixtures.h"
#include "torch/scheduler_state.h"
#include "trainsnap/checkpointer.h"
#include "trainsnap/store.h"

namespace trainsnap::capture_test {

// A data-loader cursor: batch i depends only on i.
class Cursor : public Stateful {
 public:
  std::string SaveState() const override { return std::to_string(position); }
  Status LoadState(std::string_view bytes) override {
    if (refuse) return Status::InvalidArgument("cursor refuses to load");
    position = std::stoll(std::string(bytes));
    return Status::OK();
  }
  int64_t position = 0;
  bool refuse = false;
};

enum class Opt { kAdam, kAdamAmsgrad, kAdamW, kSgdMomentum, kRmsProp, kAdagrad };

inline std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(Opt kind, std::vector<torch::Tensor> params) {
  using namespace torch::optim;
  switch (kind) {
    case Opt::kAdam: return std::make_unique<Adam>(params, AdamOptions(1e-2));
    case Opt::kAdamAmsgrad: return std::make_unique<Adam>(params, AdamOptions(1e-2).amsgrad(true).weight_decay(1e-3));
    case Opt::kAdamW: return std::make_unique<AdamW>(params, AdamWOptions(1e-2).weight_decay(0.05));
    case Opt::kSgdMomentum:
      return std::make_unique<SGD>(params, SGDOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(1e-3));
    case Opt::kRmsProp:
      return std::make_unique<RMSprop>(params, RMSpropOptions(1e-3).momentum(0.5).centered(true));
    case Opt::kAdagrad:
      return std::make_unique<Adagrad>(params, AdagradOptions(0.05).lr_decay(1e-3).initial_accumulator_value(0.1));
  }
  return nullptr;
}

inline std::vector<torch::Tensor> Trainable(torch::nn::Module& module) {
  std::vector<torch::Tensor> params;
  for (auto& p : module.parameters()) {
    if (p.requires_grad()) params.push_back(p);
  }
  return params;
}

// A model, its optimizer, a StepLR, a window of 3 weighted micro-steps and a
// cursor. `seed` seeds the model init, so two rigs can start different.
struct Rig {
  explicit Rig(Opt kind, uint64_t seed = 1) {
    torch::manual_seed(seed);
    model = LoraNet();
    optimizer = MakeOptimizer(kind, Trainable(*model));
    scheduler = std::make_unique<torch::optim::StepLR>(*optimizer, /*step_size=*/2, /*gamma=*/0.5);
    window.size = 3;
  }
  TrainingState State() {
    TrainingState state;
    state.model = model.ptr().get();
    state.optimizer = optimizer.get();
    state.scheduler = scheduler.get();
    state.accumulation = &window;
    state.extra["cursor"] = &cursor;
    return state;
  }
  // One micro-step; the optimizer steps when the window is full.
  void MicroStep() {
    torch::Generator data_gen = at::make_generator<at::CPUGeneratorImpl>(1000 + cursor.position);
    torch::Tensor x = torch::randn({8, 16}, data_gen);
    torch::Tensor y = torch::randn({8, 16}, data_gen);
    cursor.position++;
    const double weight = 1.0 + 0.5 * static_cast<double>(window.micro_step);
    torch::Tensor loss = torch::mse_loss(model->forward(x), y) * weight;
    loss.backward();
    window.weight_sum += weight;
    if (++window.micro_step == window.size) {
      torch::NoGradGuard guard;
      for (auto& p : Trainable(*model)) p.mutable_grad().div_(window.weight_sum);
      optimizer->step();
      optimizer->zero_grad();
      scheduler->step();
      window.micro_step = 0;
      window.weight_sum = 0;
    }
  }
  LoraNet model{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<torch::optim::StepLR> scheduler;
  AccumulationWindow window;
  Cursor cursor;
};

// Bitwise equality: same dtype, shape and bytes (NaN-safe, -0.0 != +0.0).
inline bool BitwiseEqual(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  torch::Tensor ca = a.detach().cpu().contiguous(), cb = b.detach().cpu().contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// Every value of the training state, by a readable key: parameters (frozen
// too), buffers, gradients, optimizer options and per-parameter state (keyed
// by parameter name, looked up through the target's own TensorImpl keys),
// scheduler step count, window, extra state and the CPU RNG state.
inline std::map<std::string, torch::Tensor> Fingerprint(const TrainingState& state) {
  std::map<std::string, torch::Tensor> out;
  auto scalar = [](double v) { return torch::tensor({v}, torch::kFloat64); };
  auto add_module = [&](const std::string& prefix, torch::nn::Module& module) {
    for (const auto& item : module.named_parameters()) {
      out[prefix + item.key()] = item.value().detach().clone();
      const torch::Tensor& grad = item.value().grad();
      out[prefix + item.key() + "#grad"] = grad.defined() ? grad.clone() : torch::tensor({-12345}, torch::kInt64);
    }
    for (const auto& item : module.named_buffers()) out[prefix + item.key() + "#buffer"] = item.value().clone();
  };
  std::map<const c10::TensorImpl*, std::string> names;
  if (state.model) {
    add_module("", *state.model);
    for (const auto& item : state.model->named_parameters()) names[item.value().unsafeGetTensorImpl()] = item.key();
  }
  for (const auto& [key, model] : state.models) {
    add_module(key + "/", *model);
    for (const auto& item : model->named_parameters()) names[item.value().unsafeGetTensorImpl()] = key + "/" + item.key();
  }
  auto add_optimizer = [&](const std::string& prefix, torch::optim::Optimizer& optimizer) {
    using namespace torch::optim;
    for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
      auto& group = optimizer.param_groups()[g];
      std::string gk = prefix + "group" + std::to_string(g) + "#";
      out[gk + "lr"] = scalar(group.options().get_lr());
      if (auto* o = dynamic_cast<AdamOptions*>(&group.options())) {
        out[gk + "opts"] = torch::tensor({std::get<0>(o->betas()), std::get<1>(o->betas()), o->eps(),
                                          o->weight_decay(), double(o->amsgrad())}, torch::kFloat64);
      } else if (auto* o = dynamic_cast<AdamWOptions*>(&group.options())) {
        out[gk + "opts"] = torch::tensor({std::get<0>(o->betas()), std::get<1>(o->betas()), o->eps(),
                                          o->weight_decay(), double(o->amsgrad())}, torch::kFloat64);
      } else if (auto* o = dynamic_cast<SGDOptions*>(&group.options())) {
        out[gk + "opts"] = torch::tensor({o->momentum(), o->dampening(), o->weight_decay(), double(o->nesterov())},
                                         torch::kFloat64);
      } else if (auto* o = dynamic_cast<RMSpropOptions*>(&group.options())) {
        out[gk + "opts"] = torch::tensor({o->alpha(), o->eps(), o->weight_decay(), o->momentum(), double(o->centered())},
                                         torch::kFloat64);
      } else if (auto* o = dynamic_cast<AdagradOptions*>(&group.options())) {
        out[gk + "opts"] = torch::tensor({o->lr_decay(), o->weight_decay(), o->initial_accumulator_value(), o->eps()},
                                         torch::kFloat64);
      }
      for (const torch::Tensor& p : group.params()) {
        std::string pk = prefix + names[p.unsafeGetTensorImpl()] + "#";
        auto it = optimizer.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
        if (it == optimizer.state().end()) {
          out[pk + "nostate"] = scalar(1);
          continue;
        }
        auto put = [&](const char* role, const torch::Tensor& t) {
          out[pk + role] = t.defined() ? t.clone() : torch::tensor({-12345}, torch::kInt64);
        };
        if (auto* s = dynamic_cast<AdamParamState*>(it->second.get())) {
          out[pk + "step"] = scalar(double(s->step()));
          put("exp_avg", s->exp_avg()); put("exp_avg_sq", s->exp_avg_sq()); put("max_exp_avg_sq", s->max_exp_avg_sq());
        } else if (auto* s = dynamic_cast<AdamWParamState*>(it->second.get())) {
          out[pk + "step"] = scalar(double(s->step()));
          put("exp_avg", s->exp_avg()); put("exp_avg_sq", s->exp_avg_sq()); put("max_exp_avg_sq", s->max_exp_avg_sq());
        } else if (auto* s = dynamic_cast<SGDParamState*>(it->second.get())) {
          put("momentum_buffer", s->momentum_buffer());
        } else if (auto* s = dynamic_cast<RMSpropParamState*>(it->second.get())) {
          out[pk + "step"] = scalar(double(s->step()));
          put("square_avg", s->square_avg()); put("momentum_buffer", s->momentum_buffer()); put("grad_avg", s->grad_avg());
        } else if (auto* s = dynamic_cast<AdagradParamState*>(it->second.get())) {
          out[pk + "step"] = scalar(double(s->step()));
          put("sum", s->sum());
        }
      }
      out[prefix + "state_entries"] = scalar(double(optimizer.state().size()));
    }
  };
  if (state.optimizer) add_optimizer("opt/", *state.optimizer);
  for (const auto& [key, optimizer] : state.optimizers) add_optimizer("opt:" + key + "/", *optimizer);
  if (state.scheduler) out["scheduler#step_count"] = scalar(double(internal::SchedulerStepCount(*state.scheduler)));
  if (state.accumulation) {
    const AccumulationWindow& w = *state.accumulation;
    out["window"] = torch::tensor({double(w.micro_step), double(w.size), w.weight_sum, w.scale}, torch::kFloat64);
  }
  for (const auto& [key, stateful] : state.extra) {
    std::string bytes = stateful->SaveState();
    out["extra#" + key] = torch::from_blob(bytes.data(), {int64_t(bytes.size())}, torch::kUInt8).clone();
  }
  out["rng#cpu"] = at::detail::getDefaultCPUGenerator().get_state();
  return out;
}

// Sets the default CPU generator (the handle is shared: a copy sets the original).
inline void SetCpuRngState(const torch::Tensor& state) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(state);
}

// Names the first key whose value differs ("" when all equal).
inline std::string FirstDifference(const std::map<std::string, torch::Tensor>& a,
                                   const std::map<std::string, torch::Tensor>& b) {
  for (const auto& [key, value] : a) {
    auto it = b.find(key);
    if (it == b.end()) return key + " (missing on the right)";
    if (!BitwiseEqual(value, it->second)) return key;
  }
  for (const auto& [key, value] : b) {
    if (!a.count(key)) return key + " (missing on the left)";
  }
  return "";
}

using testing::TempStore;

}  // namespace trainsnap::capture_test
