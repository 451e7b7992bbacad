// Per-optimizer adapters shared by capture and restore: the param-group
// options and per-parameter state of each supported torch::optim optimizer,
// mapped to and from the manifest. One traits struct per optimizer type.
#pragma once

#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <c10/util/Type.h>
#include <torch/torch.h>

#include "manifest.pb.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

using NamedStateTensors = std::vector<std::pair<std::string, torch::Tensor>>;

template <class OptimizerT, class OptionsT, class StateT>
struct OptimizerTraitsBase {
  using Optimizer = OptimizerT;
  using Options = OptionsT;
  using State = StateT;
};

// Adam and AdamW share option and state names but not a base class.
template <class OptimizerT, class OptionsT, class StateT>
struct AdamLikeTraits : OptimizerTraitsBase<OptimizerT, OptionsT, StateT> {
  static void SaveOptions(const OptionsT& o, proto::GroupOptions* out) {
    out->set_lr(o.lr());
    out->set_beta1(std::get<0>(o.betas()));
    out->set_beta2(std::get<1>(o.betas()));
    out->set_eps(o.eps());
    out->set_weight_decay(o.weight_decay());
    out->set_amsgrad(o.amsgrad());
  }
  static void LoadOptions(const proto::GroupOptions& in, OptionsT& o) {
    o.lr(in.lr());
    o.betas(std::make_tuple(in.beta1(), in.beta2()));
    o.eps(in.eps());
    o.weight_decay(in.weight_decay());
    o.amsgrad(in.amsgrad());
  }
  static int64_t Step(const StateT& s) { return s.step(); }
  static void SetStep(StateT& s, int64_t step) { s.step(step); }
  static NamedStateTensors Tensors(const StateT& s) {
    return {{"exp_avg", s.exp_avg()}, {"exp_avg_sq", s.exp_avg_sq()}, {"max_exp_avg_sq", s.max_exp_avg_sq()}};
  }
  static bool SetTensor(StateT& s, std::string_view role, const torch::Tensor& t) {
    if (role == "exp_avg") s.exp_avg(t);
    else if (role == "exp_avg_sq") s.exp_avg_sq(t);
    else if (role == "max_exp_avg_sq") s.max_exp_avg_sq(t);
    else return false;
    return true;
  }
  static std::vector<std::string_view> RequiredRoles() { return {"exp_avg", "exp_avg_sq"}; }
  // State a step() with options `o` reads without creating it first.
  static std::vector<std::string_view> RolesNeededBy(const OptionsT& o) {
    if (o.amsgrad()) return {"max_exp_avg_sq"};
    return {};
  }
};

struct AdamTraits
    : AdamLikeTraits<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState> {
  static constexpr const char* kName = "Adam";
};

struct AdamWTraits
    : AdamLikeTraits<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState> {
  static constexpr const char* kName = "AdamW";
};

struct SGDTraits
    : OptimizerTraitsBase<torch::optim::SGD, torch::optim::SGDOptions, torch::optim::SGDParamState> {
  static constexpr const char* kName = "SGD";
  static void SaveOptions(const Options& o, proto::GroupOptions* out) {
    out->set_lr(o.lr());
    out->set_momentum(o.momentum());
    out->set_dampening(o.dampening());
    out->set_weight_decay(o.weight_decay());
    out->set_nesterov(o.nesterov());
  }
  static void LoadOptions(const proto::GroupOptions& in, Options& o) {
    o.lr(in.lr());
    o.momentum(in.momentum());
    o.dampening(in.dampening());
    o.weight_decay(in.weight_decay());
    o.nesterov(in.nesterov());
  }
  static int64_t Step(const State&) { return 0; }  // SGD keeps no step count
  static void SetStep(State&, int64_t) {}
  static NamedStateTensors Tensors(const State& s) { return {{"momentum_buffer", s.momentum_buffer()}}; }
  static bool SetTensor(State& s, std::string_view role, const torch::Tensor& t) {
    if (role != "momentum_buffer") return false;
    s.momentum_buffer(t);
    return true;
  }
  static std::vector<std::string_view> RequiredRoles() { return {"momentum_buffer"}; }
  static std::vector<std::string_view> RolesNeededBy(const Options&) { return {}; }
};

struct RMSpropTraits : OptimizerTraitsBase<torch::optim::RMSprop, torch::optim::RMSpropOptions,
                                           torch::optim::RMSpropParamState> {
  static constexpr const char* kName = "RMSprop";
  static void SaveOptions(const Options& o, proto::GroupOptions* out) {
    out->set_lr(o.lr());
    out->set_alpha(o.alpha());
    out->set_eps(o.eps());
    out->set_weight_decay(o.weight_decay());
    out->set_momentum(o.momentum());
    out->set_centered(o.centered());
  }
  static void LoadOptions(const proto::GroupOptions& in, Options& o) {
    o.lr(in.lr());
    o.alpha(in.alpha());
    o.eps(in.eps());
    o.weight_decay(in.weight_decay());
    o.momentum(in.momentum());
    o.centered(in.centered());
  }
  static int64_t Step(const State& s) { return s.step(); }
  static void SetStep(State& s, int64_t step) { s.step(step); }
  static NamedStateTensors Tensors(const State& s) {
    return {{"square_avg", s.square_avg()}, {"momentum_buffer", s.momentum_buffer()}, {"grad_avg", s.grad_avg()}};
  }
  static bool SetTensor(State& s, std::string_view role, const torch::Tensor& t) {
    if (role == "square_avg") s.square_avg(t);
    else if (role == "momentum_buffer") s.momentum_buffer(t);
    else if (role == "grad_avg") s.grad_avg(t);
    else return false;
    return true;
  }
  static std::vector<std::string_view> RequiredRoles() { return {"square_avg"}; }
  static std::vector<std::string_view> RolesNeededBy(const Options& o) {
    std::vector<std::string_view> roles;
    if (o.momentum() > 0) roles.push_back("momentum_buffer");
    if (o.centered()) roles.push_back("grad_avg");
    return roles;
  }
};

struct AdagradTraits : OptimizerTraitsBase<torch::optim::Adagrad, torch::optim::AdagradOptions,
                                           torch::optim::AdagradParamState> {
  static constexpr const char* kName = "Adagrad";
  static void SaveOptions(const Options& o, proto::GroupOptions* out) {
    out->set_lr(o.lr());
    out->set_lr_decay(o.lr_decay());
    out->set_weight_decay(o.weight_decay());
    out->set_initial_accumulator_value(o.initial_accumulator_value());
    out->set_eps(o.eps());
  }
  static void LoadOptions(const proto::GroupOptions& in, Options& o) {
    o.lr(in.lr());
    o.lr_decay(in.lr_decay());
    o.weight_decay(in.weight_decay());
    o.initial_accumulator_value(in.initial_accumulator_value());
    o.eps(in.eps());
  }
  static int64_t Step(const State& s) { return s.step(); }
  static void SetStep(State& s, int64_t step) { s.step(step); }
  static NamedStateTensors Tensors(const State& s) { return {{"sum", s.sum()}}; }
  static bool SetTensor(State& s, std::string_view role, const torch::Tensor& t) {
    if (role != "sum") return false;
    s.sum(t);
    return true;
  }
  static std::vector<std::string_view> RequiredRoles() { return {"sum"}; }
  static std::vector<std::string_view> RolesNeededBy(const Options&) { return {}; }
};

// Calls visit(Traits{}) with the traits of `optimizer`'s dynamic type and
// returns its Status. NotSupported naming the type for LBFGS and any
// optimizer without traits.
template <class Visitor>
Status VisitOptimizer(torch::optim::Optimizer& optimizer, Visitor&& visit) {
  if (dynamic_cast<torch::optim::Adam*>(&optimizer)) return visit(AdamTraits{});
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) return visit(AdamWTraits{});
  if (dynamic_cast<torch::optim::SGD*>(&optimizer)) return visit(SGDTraits{});
  if (dynamic_cast<torch::optim::RMSprop*>(&optimizer)) return visit(RMSpropTraits{});
  if (dynamic_cast<torch::optim::Adagrad*>(&optimizer)) return visit(AdagradTraits{});
  if (dynamic_cast<torch::optim::LBFGS*>(&optimizer)) {
    return Status::NotSupported("type LBFGS is not supported (its state is a closure history)");
  }
  return Status::NotSupported("type " + c10::demangle(typeid(optimizer).name()) +
                              " is not supported (supported: Adam, AdamW, SGD, RMSprop, Adagrad)");
}

// Key of `param` in Optimizer::state(), as torch/optim/*.cpp build it.
inline std::string OptimizerStateKey(const torch::Tensor& param) {
  return c10::guts::to_string(param.unsafeGetTensorImpl());
}

}  // namespace trainsnap::internal
