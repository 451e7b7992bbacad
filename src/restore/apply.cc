#include "restore/apply.h"

#include <ATen/MemoryOverlap.h>

#include "torch/exception_boundary.h"
#include "torch/scheduler_state.h"

namespace trainsnap::internal {

namespace {

// LoadState must not throw; one that does counts as a refusal, so that the
// ones before it still get rolled back.
Status LoadExtra(RestorePlan::Extra& item, const std::string& bytes, const TensorState* tensor_state) {
  if (item.tensor_target != nullptr) {
    return ExceptionBoundary([&] { return item.tensor_target->LoadState(*tensor_state); }, "LoadState");
  }
  return ExceptionBoundary([&] { return item.target->LoadState(bytes); }, "LoadState");
}

// Why an in-place copy into `live` would throw, or "" when it would not.
std::string RefusesInPlaceWrites(const torch::Tensor& live) {
  if (live.layout() != c10::kStrided) return "has layout " + c10::str(live.layout());
  if (live.is_inference() && !c10::InferenceMode::is_enabled()) {
    return "is an inference tensor (created under c10::InferenceMode), which LibTorch does not let restore "
           "write in place outside InferenceMode";
  }
  if (at::has_internal_overlap(live) == at::MemOverlap::Yes) {
    return "has elements that share memory (a stride of 0, e.g. from expand()), which an in-place copy refuses";
  }
  return "";
}

// The live gradient is written in place only when it has the parameter's
// layout and accepts the write; otherwise it is replaced (cannot fail).
bool SameLayout(const torch::Tensor& a, const torch::Tensor& b) {
  return a.defined() && a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && a.device() == b.device() &&
         RefusesInPlaceWrites(a).empty();
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

Status CheckWritable(const RestorePlan& plan) {
  for (const RestorePlan::Copy& copy : plan.copies) {
    const std::string why = RefusesInPlaceWrites(copy.live);
    if (why.empty()) continue;
    const std::string message = copy.What() + " of the target " + why + "; nothing was restored";
    if (copy.live.layout() != c10::kStrided) return Status::NotSupported(message);
    return Status::InvalidArgument(message);
  }
  return Status::OK();
}

// Each extra's state before the restore. SaveState may hand back tensors
// that alias live state (a Python state_dict() does, and a LoadState that
// copies in place would then overwrite the "previous" values too): they are
// cloned, so that an undo really restores them.
Status LoadExtras(RestorePlan& plan, ExtrasUndo* undo) {
  std::vector<ExtrasUndo::Previous> previous(plan.extra.size());
  for (size_t i = 0; i < plan.extra.size(); ++i) {
    RestorePlan::Extra& item = plan.extra[i];
    ExtrasUndo::Previous& before = previous[i];
    before.item = &item;
    Status saved = ExceptionBoundary(
        [&] {
          if (item.tensor_target == nullptr) {
            before.bytes = item.target->SaveState();
            return Status::OK();
          }
          TRAINSNAP_RETURN_IF_ERROR(item.tensor_target->SaveState(&before.tensor_state));
          torch::NoGradGuard no_grad;
          for (auto& [name, tensor] : before.tensor_state.tensors) {
            if (tensor.defined()) tensor = tensor.detach().clone();
          }
          return Status::OK();
        },
        "SaveState");
    if (!saved.ok()) return saved.WithContext("extra state `" + item.name + "`: saving its state before the restore");
  }
  for (size_t i = 0; i < plan.extra.size(); ++i) {
    Status status = LoadExtra(plan.extra[i], plan.extra[i].bytes, &plan.extra[i].tensor_state);
    if (status.ok()) continue;
    // Every extra loaded before gets its previous state back, even when one
    // of them fails to: each failure is named.
    previous.resize(i);
    undo->previous_ = std::move(previous);
    Status undone = undo->Undo();
    if (!undone.ok()) {
      return Status::Aborted("extra state `" + plan.extra[i].name + "` refused its bytes (" + status.ToString() + ")" +
                             undone.message());
    }
    return status.WithContext("extra state `" + plan.extra[i].name + "`");
  }
  undo->previous_ = std::move(previous);
  return Status::OK();
}

Status ExtrasUndo::Undo() {
  std::string failures;
  for (Previous& before : previous_) {
    Status undo = LoadExtra(*before.item, before.bytes, &before.tensor_state);
    if (!undo.ok()) {
      failures += "; restoring `" + before.item->name + "` to its previous state failed: " + undo.ToString();
    }
  }
  previous_.clear();
  if (failures.empty()) return Status::OK();
  return Status::Aborted(failures);
}

void WritePlan(RestorePlan& plan) {
  torch::NoGradGuard no_grad;
  for (RestorePlan::Copy& copy : plan.copies) copy.live.copy_(copy.staged);
  for (RestorePlan::Grad& grad : plan.grads) ApplyGrad(grad);
  for (PreparedOptimizer& optimizer : plan.optimizers) ApplyOptimizer(optimizer);
  if (plan.scheduler != nullptr) SetSchedulerStepCount(*plan.scheduler, plan.scheduler_step_count);
  if (plan.accumulation != nullptr) *plan.accumulation = plan.window;
  if (plan.rng.has_value()) ApplyRng(*plan.rng);
}

}  // namespace trainsnap::internal
