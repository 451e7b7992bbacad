#include "restore/apply.h"

#include "capture/scheduler_state.h"

namespace trainsnap::internal {

namespace {

Status ApplyExtra(std::vector<RestorePlan::Extra>& extra) {
  std::vector<std::string> previous;
  previous.reserve(extra.size());
  for (const RestorePlan::Extra& item : extra) previous.push_back(item.target->SaveState());
  // LoadState must not throw; one that does counts as a refusal, so that the
  // ones before it still get rolled back.
  auto load = [](Stateful& target, const std::string& bytes) -> Status {
    try {
      return target.LoadState(bytes);
    } catch (const std::exception& e) {
      return Status::Aborted(std::string("LoadState threw: ") + e.what());
    }
  };
  for (size_t i = 0; i < extra.size(); ++i) {
    Status status = load(*extra[i].target, extra[i].bytes);
    if (status.ok()) continue;
    for (size_t j = 0; j < i; ++j) {
      Status undo = load(*extra[j].target, previous[j]);
      if (!undo.ok()) {
        return Status::Aborted("extra state `" + extra[i].name + "` refused its bytes (" + status.ToString() +
                               "), and restoring `" + extra[j].name + "` to its previous state failed: " +
                               undo.ToString());
      }
    }
    return status.WithContext("extra state `" + extra[i].name + "`");
  }
  return Status::OK();
}

bool SameLayout(const torch::Tensor& a, const torch::Tensor& b) {
  return a.defined() && a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && a.device() == b.device();
}

void ApplyGrad(RestorePlan::Grad& grad) {
  torch::Tensor& live = grad.param.mutable_grad();
  switch (grad.state) {
    case proto::GRAD_STORED:
      if (SameLayout(live, grad.param)) {
        live.copy_(grad.staged);
      } else {
        live = grad.staged;
      }
      break;
    case proto::GRAD_ZERO:
    case proto::GRAD_OMITTED:
      if (SameLayout(live, grad.param)) {
        live.zero_();
      } else {
        live = torch::zeros_like(grad.param, c10::MemoryFormat::Contiguous);
      }
      break;
    default:
      live = torch::Tensor();
      break;
  }
}

}  // namespace

Status ApplyPlan(RestorePlan& plan) {
  TRAINSNAP_RETURN_IF_ERROR(ApplyExtra(plan.extra));
  torch::NoGradGuard no_grad;
  for (RestorePlan::Copy& copy : plan.copies) copy.live.copy_(copy.staged);
  for (RestorePlan::Grad& grad : plan.grads) ApplyGrad(grad);
  for (PreparedOptimizer& optimizer : plan.optimizers) ApplyOptimizer(optimizer);
  if (plan.scheduler != nullptr) SetSchedulerStepCount(*plan.scheduler, plan.scheduler_step_count);
  if (plan.accumulation != nullptr) *plan.accumulation = plan.window;
  if (plan.rng.has_value()) ApplyRng(*plan.rng);
  return Status::OK();
}

}  // namespace trainsnap::internal
