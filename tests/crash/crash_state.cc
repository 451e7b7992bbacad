#include "crash/crash_state.h"

#include <cstring>

namespace trainsnap::testing {
namespace {

bool SameBits(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const torch::Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

const torch::optim::AdamParamState* AdamState(const torch::optim::Adam& opt, const torch::Tensor& p) {
  auto it = opt.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
  if (it == opt.state().end()) return nullptr;
  return dynamic_cast<const torch::optim::AdamParamState*>(it->second.get());
}

}  // namespace

CrashState MakeCrashState(int64_t step) {
  torch::manual_seed(static_cast<uint64_t>(step) * 7919 + 1);
  CrashState s;
  s.model = torch::nn::Sequential(torch::nn::Linear(16, 8), torch::nn::Tanh(), torch::nn::Linear(8, 4));
  s.optimizer = std::make_unique<torch::optim::Adam>(s.model->parameters(), torch::optim::AdamOptions(1e-2));
  for (int batch = 0; batch < 2; ++batch) {
    const torch::Tensor x = torch::randn({4, 16});
    s.optimizer->zero_grad();
    s.model->forward(x).pow(2).sum().backward();
    if (batch == 0) s.optimizer->step();  // the second batch's gradients stay pending
  }
  return s;
}

std::string CompareCrashStates(const CrashState& got, const CrashState& want) {
  const auto gp = got.model->named_parameters(), wp = want.model->named_parameters();
  if (gp.size() != wp.size()) return "parameter count differs";
  for (size_t i = 0; i < wp.size(); ++i) {
    const std::string& name = wp[i].key();
    if (gp[i].key() != name) return "parameter order differs at " + name;
    if (!SameBits(gp[i].value(), wp[i].value())) return "parameter " + name + " differs";
    if (!SameBits(gp[i].value().grad(), wp[i].value().grad())) return "gradient of " + name + " differs";
    const auto* gs = AdamState(*got.optimizer, gp[i].value());
    const auto* ws = AdamState(*want.optimizer, wp[i].value());
    if (!gs || !ws) return "Adam state of " + name + " missing";
    if (gs->step() != ws->step()) return "Adam step of " + name + " differs";
    if (!SameBits(gs->exp_avg(), ws->exp_avg())) return "exp_avg of " + name + " differs";
    if (!SameBits(gs->exp_avg_sq(), ws->exp_avg_sq())) return "exp_avg_sq of " + name + " differs";
  }
  return "";
}

}  // namespace trainsnap::testing
