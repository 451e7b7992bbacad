// OverheadBudget: decides, on the training thread, whether a capture fits in
// CheckpointerOptions::overhead_budget, the largest fraction of the training
// thread's wall time that captures may take. Pure bookkeeping over time
// points given by the caller (no clock of its own), so that it is tested
// with exact times. Thread-compatible: the training thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "trainsnap/status.h"

namespace trainsnap::internal {

class OverheadBudget {
 public:
  using Clock = std::chrono::steady_clock;

  // OK for 0 (off) and for a fraction in (0, 1); InvalidArgument otherwise
  // (negative, NaN, >= 1), naming the value.
  static Status Validate(double budget);

  // `budget` must be valid (Validate); 0 = off (never skips).
  explicit OverheadBudget(double budget) : budget_(budget) {}

  bool enabled() const { return budget_ > 0; }
  // Whether a capture starting at `now` should be skipped: the time spent in
  // captures so far plus the predicted cost of this one, over the wall time
  // since the first capture started plus that cost, would exceed the budget.
  // False when off and before the first capture has been recorded.
  bool ShouldSkip(Clock::time_point now) const;
  // A capture (not skipped) took the training thread from `start` to `end`,
  // stalls and back-pressure waits included. Failed captures count too.
  void Record(Clock::time_point start, Clock::time_point end);
  // The predicted cost of the next capture, in seconds: an exponentially
  // weighted average of the recorded costs (0 before the first).
  double predicted_seconds() const { return predicted_s_; }

 private:
  // Weight of the newest cost in the prediction: a capture that grew (more
  // state, a slower disk) is believed within a few captures.
  static constexpr double kNewestWeight = 0.5;

  const double budget_;
  std::optional<Clock::time_point> first_start_;
  double spent_s_ = 0;      // wall time inside recorded captures
  double predicted_s_ = 0;  // see predicted_seconds()
};

}  // namespace trainsnap::internal
