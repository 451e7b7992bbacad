// Per-optimizer adapters shared by capture and restore: the param-group
// options and per-parameter state of each supported torch::optim optimizer,
// mapped to and from the manifest. One traits struct per optimizer type.
#pragma once

#include <charconv>
#include <cstdint>

#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <c10/util/Type.h>
#include <torch/torch.h>

#include "manifest.pb.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

using NamedStateTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Calls field(get(o), proto_get, proto_set) when `o` has the option that
// `get` reads (get is SFINAE-friendly: not invocable on other options types).
template <class O, class Get, class ProtoGet, class ProtoSet, class Field>
void IfOption(O& o, Get get, ProtoGet proto_get, ProtoSet proto_set, Field& field) {
  if constexpr (std::is_invocable_v<Get, O&>) field(get(o), proto_get, proto_set);
}

// The manifest's GroupOptions holds the union of the supported optimizers'
// options under LibTorch's names (betas as beta1, beta2). Calls
// field(o.name(), &proto::GroupOptions::name, &proto::GroupOptions::set_name)
// for each of them that `o`'s type has, with `o` const or not (TORCH_ARG's
// accessors return a reference). Saving and loading both read this one list,
// so that an option cannot be saved and not loaded.
template <class O, class Field>
void ForEachGroupOption(O& o, Field&& field) {
  using P = proto::GroupOptions;
  IfOption(o, [](auto& x) -> decltype(x.lr()) { return x.lr(); }, &P::lr, &P::set_lr, field);
  IfOption(o, [](auto& x) -> decltype(std::get<0>(x.betas())) { return std::get<0>(x.betas()); }, &P::beta1,
           &P::set_beta1, field);
  IfOption(o, [](auto& x) -> decltype(std::get<1>(x.betas())) { return std::get<1>(x.betas()); }, &P::beta2,
           &P::set_beta2, field);
  IfOption(o, [](auto& x) -> decltype(x.eps()) { return x.eps(); }, &P::eps, &P::set_eps, field);
  IfOption(o, [](auto& x) -> decltype(x.weight_decay()) { return x.weight_decay(); }, &P::weight_decay,
           &P::set_weight_decay, field);
  IfOption(o, [](auto& x) -> decltype(x.amsgrad()) { return x.amsgrad(); }, &P::amsgrad, &P::set_amsgrad, field);
  IfOption(o, [](auto& x) -> decltype(x.momentum()) { return x.momentum(); }, &P::momentum, &P::set_momentum,
           field);
  IfOption(o, [](auto& x) -> decltype(x.dampening()) { return x.dampening(); }, &P::dampening,
           &P::set_dampening, field);
  IfOption(o, [](auto& x) -> decltype(x.nesterov()) { return x.nesterov(); }, &P::nesterov, &P::set_nesterov,
           field);
  IfOption(o, [](auto& x) -> decltype(x.alpha()) { return x.alpha(); }, &P::alpha, &P::set_alpha, field);
  IfOption(o, [](auto& x) -> decltype(x.centered()) { return x.centered(); }, &P::centered, &P::set_centered,
           field);
  IfOption(o, [](auto& x) -> decltype(x.lr_decay()) { return x.lr_decay(); }, &P::lr_decay, &P::set_lr_decay,
           field);
  IfOption(o, [](auto& x) -> decltype(x.initial_accumulator_value()) { return x.initial_accumulator_value(); },
           &P::initial_accumulator_value, &P::set_initial_accumulator_value, field);
}

// Each optimizer's traits list its state tensors once: ForEachTensor(s,
// tensor) calls tensor("role", s.role()) for every state tensor, in capture
// order, with `s` const or not. The mappings to and from the manifest below
// read that list and ForEachGroupOption. Step/SetStep read the per-parameter
// step count; an optimizer without one (SGD) hides them.
template <class Traits, class OptimizerT, class OptionsT, class StateT>
struct OptimizerTraitsBase {
  using Optimizer = OptimizerT;
  using Options = OptionsT;
  using State = StateT;

  static void SaveOptions(const OptionsT& o, proto::GroupOptions* out) {
    ForEachGroupOption(o, [out](const auto& value, auto /*get*/, auto set) { (out->*set)(value); });
  }
  static void LoadOptions(const proto::GroupOptions& in, OptionsT& o) {
    ForEachGroupOption(o, [&in](auto& value, auto get, auto /*set*/) { value = (in.*get)(); });
  }
  static int64_t Step(const StateT& s) { return s.step(); }
  static void SetStep(StateT& s, int64_t step) { s.step(step); }
  static NamedStateTensors Tensors(const StateT& s) {
    NamedStateTensors tensors;
    Traits::ForEachTensor(s, [&tensors](const char* role, const torch::Tensor& t) { tensors.emplace_back(role, t); });
    return tensors;
  }
  // False when `role` is no state tensor of this optimizer.
  static bool SetTensor(StateT& s, std::string_view role, const torch::Tensor& t) {
    bool known = false;
    Traits::ForEachTensor(s, [&](const char* name, torch::Tensor& slot) {
      if (role != name) return;
      slot = t;
      known = true;
    });
    return known;
  }
};

// Adam and AdamW share option and state names but not a base class.
template <class Traits, class OptimizerT, class OptionsT, class StateT>
struct AdamLikeTraits : OptimizerTraitsBase<Traits, OptimizerT, OptionsT, StateT> {
  template <class S, class Tensor>
  static void ForEachTensor(S& s, Tensor&& tensor) {
    tensor("exp_avg", s.exp_avg());
    tensor("exp_avg_sq", s.exp_avg_sq());
    tensor("max_exp_avg_sq", s.max_exp_avg_sq());
  }
  static std::vector<std::string_view> RequiredRoles() { return {"exp_avg", "exp_avg_sq"}; }
  // State a step() with options `o` reads without creating it first.
  static std::vector<std::string_view> RolesNeededBy(const OptionsT& o) {
    if (o.amsgrad()) return {"max_exp_avg_sq"};
    return {};
  }
};

struct AdamTraits
    : AdamLikeTraits<AdamTraits, torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState> {
  static constexpr const char* kName = "Adam";
};

struct AdamWTraits : AdamLikeTraits<AdamWTraits, torch::optim::AdamW, torch::optim::AdamWOptions,
                                    torch::optim::AdamWParamState> {
  static constexpr const char* kName = "AdamW";
};

struct SGDTraits : OptimizerTraitsBase<SGDTraits, torch::optim::SGD, torch::optim::SGDOptions,
                                       torch::optim::SGDParamState> {
  static constexpr const char* kName = "SGD";
  template <class S, class Tensor>
  static void ForEachTensor(S& s, Tensor&& tensor) {
    tensor("momentum_buffer", s.momentum_buffer());
  }
  static int64_t Step(const State&) { return 0; }  // SGD keeps no step count
  static void SetStep(State&, int64_t) {}
  static std::vector<std::string_view> RequiredRoles() { return {"momentum_buffer"}; }
  static std::vector<std::string_view> RolesNeededBy(const Options&) { return {}; }
};

struct RMSpropTraits : OptimizerTraitsBase<RMSpropTraits, torch::optim::RMSprop, torch::optim::RMSpropOptions,
                                           torch::optim::RMSpropParamState> {
  static constexpr const char* kName = "RMSprop";
  template <class S, class Tensor>
  static void ForEachTensor(S& s, Tensor&& tensor) {
    tensor("square_avg", s.square_avg());
    tensor("momentum_buffer", s.momentum_buffer());
    tensor("grad_avg", s.grad_avg());
  }
  static std::vector<std::string_view> RequiredRoles() { return {"square_avg"}; }
  static std::vector<std::string_view> RolesNeededBy(const Options& o) {
    std::vector<std::string_view> roles;
    if (o.momentum() > 0) roles.push_back("momentum_buffer");
    if (o.centered()) roles.push_back("grad_avg");
    return roles;
  }
};

struct AdagradTraits : OptimizerTraitsBase<AdagradTraits, torch::optim::Adagrad, torch::optim::AdagradOptions,
                                           torch::optim::AdagradParamState> {
  static constexpr const char* kName = "Adagrad";
  template <class S, class Tensor>
  static void ForEachTensor(S& s, Tensor&& tensor) {
    tensor("sum", s.sum());
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

// Key of `param` in Optimizer::state(), as torch/optim/*.cpp build it:
// c10::guts::to_string of its TensorImpl's address, which an ostream writes
// as "0x" and lower-case hex digits. Written here without the ostringstream
// that costs per parameter on the training thread.
inline std::string OptimizerStateKey(const torch::Tensor& param) {
  char key[2 + 2 * sizeof(uintptr_t)] = {'0', 'x'};
  const auto address = reinterpret_cast<uintptr_t>(param.unsafeGetTensorImpl());
  char* end = std::to_chars(key + 2, key + sizeof(key), address, 16).ptr;
  return std::string(key, static_cast<size_t>(end - key));
}

}  // namespace trainsnap::internal
