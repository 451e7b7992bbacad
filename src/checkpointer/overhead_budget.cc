#include "checkpointer/overhead_budget.h"

#include <cmath>
#include <sstream>

namespace trainsnap::internal {

namespace {

double Seconds(OverheadBudget::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Status OverheadBudget::Validate(double budget) {
  if (budget == 0) return Status::OK();
  if (std::isnan(budget) || budget < 0 || budget >= 1) {
    std::ostringstream message;
    message << "overhead_budget must be 0 (off) or a fraction in (0, 1), not " << budget;
    return Status::InvalidArgument(message.str());
  }
  return Status::OK();
}

void OverheadBudget::EstimateFirst(uint64_t staged_bytes) {
  predicted_s_ = static_cast<double>(staged_bytes) / kFirstCaptureBytesPerSecond;
}

bool OverheadBudget::ShouldSkip(Clock::time_point now) const {
  if (!enabled() || !predicted_s_.has_value()) return false;
  // The denominator includes the predicted cost: once this capture is done,
  // the wall time will have grown by it too.
  const double predicted_s = *predicted_s_;
  const double total_s = Seconds(now - start_) + predicted_s;
  if (total_s <= 0) return false;
  return (spent_s_ + predicted_s) / total_s > budget_;
}

void OverheadBudget::Record(Clock::time_point start, Clock::time_point end) {
  const double cost_s = Seconds(end - start);
  // The first measured cost replaces the estimate (EstimateFirst) outright.
  predicted_s_ = recorded_ ? kNewestWeight * cost_s + (1 - kNewestWeight) * *predicted_s_ : cost_s;
  recorded_ = true;
  spent_s_ += cost_s;
}

}  // namespace trainsnap::internal
