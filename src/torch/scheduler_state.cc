#include "torch/scheduler_state.h"

namespace trainsnap::internal {

namespace {

// A derived class may name a protected member of its base through a
// pointer-to-member; the pointer then works on any LRScheduler, without
// touching the user's own (possibly final) scheduler class. Never instantiated.
class StepCountAccess : public torch::optim::LRScheduler {
 public:
  static auto Member() { return &StepCountAccess::step_count_; }
};

}  // namespace

uint64_t SchedulerStepCount(const torch::optim::LRScheduler& scheduler) {
  return scheduler.*StepCountAccess::Member();
}

void SetSchedulerStepCount(torch::optim::LRScheduler& scheduler, uint64_t step_count) {
  using StepCount = std::remove_reference_t<decltype(scheduler.*StepCountAccess::Member())>;
  scheduler.*StepCountAccess::Member() = static_cast<StepCount>(step_count);
}

}  // namespace trainsnap::internal
