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

  // The rate at which a run's first capture is assumed to cost the loop
  // (EstimateFirst). Slower than the stall alone on purpose: on the 2-core
  // development machine the bench's dense state (302 MB) staged in 95 ms
  // (3.2 GB/s) at its first capture, but that one capture slowed a 20-step
  // loop by 12 %, its encode competing with training for the cores and the
  // final Flush waiting for it (bench/README.md, "Overhead budget"). A slower
  // guess only delays the first capture; after it, the measured costs decide.
  static constexpr double kFirstCaptureBytesPerSecond = 1e9;

  // OK for 0 (off) and for a fraction in (0, 1); InvalidArgument otherwise
  // (negative, NaN, >= 1), naming the value.
  static Status Validate(double budget);

  // `budget` must be valid (Validate); 0 = off (never skips). The wall time
  // that the budget is a fraction of starts at `start` (the Checkpointer's
  // opening).
  OverheadBudget(double budget, Clock::time_point start) : budget_(budget), start_(start) {}

  bool enabled() const { return budget_ > 0; }
  // Whether the next capture has no predicted cost yet: on, and neither
  // EstimateFirst nor Record has been called.
  bool needs_estimate() const { return enabled() && !predicted_s_.has_value(); }
  // Predicts the first capture's cost from the bytes it will stage, at
  // kFirstCaptureBytesPerSecond. The first Record replaces the prediction.
  void EstimateFirst(uint64_t staged_bytes);
  // Whether a capture starting at `now` should be skipped: the time spent in
  // captures so far plus the predicted cost of this one, over the wall time
  // since `start` plus that cost, would exceed the budget. So a first
  // capture waits until the wall time pays for its estimate (a 300 MB state,
  // 0.3 s at 1 GB/s, under a budget of 0.02: 14.7 s). False when off, and
  // while nothing predicts the cost (needs_estimate: a capture whose state
  // could not be estimated runs, and fails or is timed).
  bool ShouldSkip(Clock::time_point now) const;
  // A capture (not skipped) took the training thread from `start` to `end`,
  // stalls and back-pressure waits included. Failed captures count too.
  void Record(Clock::time_point start, Clock::time_point end);
  // The predicted cost of the next capture, in seconds: an exponentially
  // weighted average of the recorded costs; before the first, EstimateFirst's
  // (0 when neither).
  double predicted_seconds() const { return predicted_s_.value_or(0); }

 private:
  // Weight of the newest cost in the prediction: a capture that grew (more
  // state, a slower disk) is believed within a few captures.
  static constexpr double kNewestWeight = 0.5;

  const double budget_;
  const Clock::time_point start_;
  bool recorded_ = false;  // Record was called
  double spent_s_ = 0;     // wall time inside recorded captures
  // See predicted_seconds(); empty until EstimateFirst or Record.
  std::optional<double> predicted_s_;
};

}  // namespace trainsnap::internal
