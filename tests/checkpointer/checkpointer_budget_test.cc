// CheckpointerOptions::overhead_budget through the public Checkpointer, with
// real time: a tight budget defers the first capture until the wall time pays
// for its estimate and skips most captures of a multi-MB state, a loose one
// skips none, back-pressure becomes a skip, and every committed snapshot (the
// steps not skipped) restores bit-exactly.
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "capture/pipeline.h"
#include "checkpointer/overhead_budget.h"
#include "testing/training_rig.h"
#include "trainsnap/checkpointer.h"

// Named, as the test sources are built in unity (shared anonymous namespace).
namespace trainsnap::budget_test {
namespace {

using capture_test::BitwiseEqual;
using capture_test::TempStore;

// A 4 MiB weight (and bias) that changes every step, for 1 ms of "training".
struct BigLoop {
  BigLoop() : model(torch::nn::Linear(1024, 1024)) {}
  TrainingState State() {
    TrainingState state;
    state.model = model.ptr().get();
    state.rng = false;
    return state;
  }
  void Step() {
    torch::NoGradGuard guard;
    model->weight.add_(1.0f / 64);
    model->bias.add_(1.0f);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  torch::nn::Linear model;
};

using Clock = std::chrono::steady_clock;

struct Outcome {
  std::vector<int64_t> committed;
  std::vector<int64_t> skipped;
  std::map<int64_t, torch::Tensor> weights;  // of the committed steps, as captured
  std::map<int64_t, Clock::time_point> called;  // when CaptureAsync was called, per committed step
};

// Captures every step of `steps`, checking each handle.
Outcome RunLoop(Checkpointer& checkpointer, BigLoop& loop, int steps) {
  Outcome out;
  std::vector<CaptureHandle> handles;
  for (int64_t step = 1; step <= steps; ++step) {
    loop.Step();
    const Clock::time_point called = Clock::now();
    Result<CaptureHandle> handle = checkpointer.CaptureAsync(step, loop.State());
    EXPECT_TRUE(handle.ok()) << handle.status().ToString();
    if (!handle.ok()) continue;
    EXPECT_EQ(handle->step(), step);
    if (handle->skipped()) {
      EXPECT_TRUE(handle->Ready());
      EXPECT_TRUE(handle->Wait().ok());
      out.skipped.push_back(step);
    } else {
      out.committed.push_back(step);
      out.weights[step] = loop.model->weight.detach().clone();
      out.called[step] = called;
      handles.push_back(*handle);
    }
  }
  for (const CaptureHandle& handle : handles) {
    EXPECT_FALSE(handle.skipped());
    EXPECT_TRUE(handle.Wait().ok());
  }
  EXPECT_TRUE(checkpointer.Flush().ok());
  return out;
}

std::vector<int64_t> StoredSteps(Store& store) {
  std::vector<int64_t> steps;
  Result<std::vector<SnapshotInfo>> stored = store.List();
  EXPECT_TRUE(stored.ok()) << stored.status().ToString();
  if (stored.ok()) {
    for (const SnapshotInfo& info : *stored) steps.push_back(info.step);
  }
  return steps;
}

void ExpectRestoresBitExactly(Store& store, const Outcome& outcome) {
  EXPECT_EQ(StoredSteps(store), outcome.committed);
  Checkpointer reader(store);
  for (int64_t step : outcome.committed) {
    BigLoop target;
    ASSERT_TRUE(reader.Restore(step, target.State()).ok()) << step;
    EXPECT_TRUE(BitwiseEqual(target.model->weight, outcome.weights.at(step))) << step;
  }
}

TEST(CheckpointerBudgetTest, OpenRefusesABudgetOutOfRange) {
  TempStore ts;
  for (double bad : {-0.5, 1.0, 2.0, std::numeric_limits<double>::quiet_NaN()}) {
    CheckpointerOptions options;
    options.overhead_budget = bad;
    Result<std::unique_ptr<Checkpointer>> opened = Checkpointer::Open(*ts.store, options);
    ASSERT_FALSE(opened.ok()) << bad;
    EXPECT_EQ(opened.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(opened.status().message().find("overhead_budget"), std::string::npos);
    // Constructed anyway: every capture fails the same way, nothing is stored.
    Checkpointer constructed(*ts.store, options);
    BigLoop loop;
    Result<CaptureHandle> handle = constructed.CaptureAsync(1, loop.State());
    ASSERT_FALSE(handle.ok());
    EXPECT_EQ(handle.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(constructed.Flush().code(), StatusCode::kInvalidArgument);
  }
  for (double good : {0.0, 0.02, 0.5}) {
    CheckpointerOptions options;
    options.overhead_budget = good;
    EXPECT_TRUE(Checkpointer::Open(*ts.store, options).ok()) << good;
  }
  EXPECT_TRUE(StoredSteps(*ts.store).empty());
}

TEST(CheckpointerBudgetTest, TightBudgetSkipsMostCapturesAndCommitsTheRest) {
  TempStore ts;
  CheckpointerOptions options;
  options.overhead_budget = 0.02;
  const Clock::time_point before_open = Clock::now();
  auto opened = Checkpointer::Open(*ts.store, options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Checkpointer& checkpointer = **opened;
  BigLoop loop;
  // Steps of >= 1 ms: the first capture (below) comes after about 210 of them.
  const int kSteps = 400;
  Outcome outcome = RunLoop(checkpointer, loop, kSteps);
  ASSERT_EQ(outcome.committed.size() + outcome.skipped.size(), static_cast<size_t>(kSteps));
  ASSERT_FALSE(outcome.committed.empty());
  // The first capture is estimated at 4 MiB + 4 KiB (4,198,400 bytes) at
  // kFirstCaptureBytesPerSecond: 4.1984 ms. It waits until 4.1984 /
  // (elapsed + 4.1984) <= 0.02 since the opening, i.e. elapsed >= 205.72 ms.
  ASSERT_EQ(internal::OverheadBudget::kFirstCaptureBytesPerSecond, 1e9);
  EXPECT_GT(outcome.committed.front(), 1);
  const Clock::time_point first_commit = outcome.called.at(outcome.committed.front());
  EXPECT_GE(std::chrono::duration<double>(first_commit - before_open).count(), 0.20572);
  EXPECT_EQ(outcome.skipped.front(), 1);
  EXPECT_GT(outcome.skipped.size(), static_cast<size_t>(kSteps) * 3 / 4);
  PipelineStats stats = checkpointer.pipeline_stats();
  EXPECT_EQ(stats.captures_skipped, outcome.skipped.size());
  EXPECT_EQ(stats.last_committed_step, outcome.committed.back());
  if (outcome.committed.size() >= 2) {
    const size_t n = outcome.committed.size();
    EXPECT_EQ(stats.steps_between_last_commits, outcome.committed[n - 1] - outcome.committed[n - 2]);
  } else {
    EXPECT_FALSE(stats.steps_between_last_commits.has_value());
  }
  ExpectRestoresBitExactly(*ts.store, outcome);
}

TEST(CheckpointerBudgetTest, LooseBudgetSkipsNothing) {
  TempStore ts;
  CheckpointerOptions options;
  options.overhead_budget = 0.99;
  options.max_captures_in_flight = 0;  // no back-pressure in steps
  auto opened = Checkpointer::Open(*ts.store, options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  BigLoop loop;
  Outcome outcome = RunLoop(**opened, loop, 20);
  EXPECT_TRUE(outcome.skipped.empty());
  EXPECT_EQ(outcome.committed.size(), 20u);
  PipelineStats stats = (*opened)->pipeline_stats();
  EXPECT_EQ(stats.captures_skipped, 0u);
  EXPECT_EQ(stats.steps_between_last_commits, 1);
  ExpectRestoresBitExactly(*ts.store, outcome);
}

TEST(CheckpointerBudgetTest, NoBudgetNeverSkipsAndReportsNoSkips) {
  TempStore ts;
  Checkpointer checkpointer(*ts.store);
  BigLoop loop;
  Outcome outcome = RunLoop(checkpointer, loop, 5);
  EXPECT_TRUE(outcome.skipped.empty());
  PipelineStats stats = checkpointer.pipeline_stats();
  EXPECT_EQ(stats.captures_skipped, 0u);
  EXPECT_EQ(stats.steps_between_last_commits, 1);
  EXPECT_FALSE(CaptureHandle().skipped());
}

// A state the budget cannot estimate is not skipped in silence: its capture
// runs and fails with Stage's error.
TEST(CheckpointerBudgetTest, AStateWithoutAnEstimateFailsAsWithoutABudget) {
  TempStore ts;
  CheckpointerOptions options;
  options.overhead_budget = 0.02;
  auto opened = Checkpointer::Open(*ts.store, options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  BigLoop loop;
  torch::optim::LBFGS lbfgs(loop.model->parameters());
  TrainingState state = loop.State();
  state.optimizer = &lbfgs;
  Result<CaptureHandle> handle = (*opened)->CaptureAsync(1, state);
  ASSERT_FALSE(handle.ok());
  EXPECT_EQ(handle.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(handle.status().message().find("capture step 1"), std::string::npos) << handle.status().ToString();
  EXPECT_EQ((*opened)->pipeline_stats().captures_skipped, 0u);
  EXPECT_TRUE(StoredSteps(*ts.store).empty());
}

// With a budget, a capture that would wait at max_captures_in_flight is
// skipped instead; the next one that finds a slot commits.
TEST(CheckpointerBudgetTest, BackPressureBecomesASkip) {
  struct SlowEncoder {
    SlowEncoder() {
      internal::CapturePipeline::SetEncodeDelayForTesting(
          [](int64_t step) { return std::chrono::milliseconds(step == 1 ? 500 : 0); });
    }
    ~SlowEncoder() { internal::CapturePipeline::SetEncodeDelayForTesting({}); }
  } slow;
  TempStore ts;
  CheckpointerOptions options;
  options.overhead_budget = 0.9;  // the cost prediction alone skips nothing here
  options.max_captures_in_flight = 1;
  auto opened = Checkpointer::Open(*ts.store, options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Checkpointer& checkpointer = **opened;
  BigLoop loop;
  // The first capture's estimate (4.2 ms) fits 0.9 of the wall time once
  // 0.47 ms have passed since the opening.
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  Result<CaptureHandle> first = checkpointer.CaptureAsync(1, loop.State());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->skipped());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // step 1 still encoding
  loop.Step();
  Result<CaptureHandle> second = checkpointer.CaptureAsync(2, loop.State());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(second->skipped());
  EXPECT_TRUE(second->Wait().ok());
  ASSERT_TRUE(first->Wait().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  loop.Step();
  Result<CaptureHandle> third = checkpointer.CaptureAsync(3, loop.State());
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_FALSE(third->skipped());
  ASSERT_TRUE(third->Wait().ok());
  PipelineStats stats = checkpointer.pipeline_stats();
  EXPECT_EQ(stats.capture_waits, 0u);
  EXPECT_EQ(stats.captures_skipped, 1u);
  EXPECT_EQ(stats.steps_between_last_commits, 2);
  EXPECT_EQ(StoredSteps(*ts.store), (std::vector<int64_t>{1, 3}));
}

}  // namespace
}  // namespace trainsnap::budget_test
