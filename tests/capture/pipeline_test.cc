// The asynchronous capture pipeline through the public Checkpointer: values
// frozen at CaptureAsync while training goes on, commit order, errors through
// handles and Flush, the staging bound under a slow encoder, a capture larger
// than the bound, large CPU tensors copied in ranges, parallel restore, the
// bound in captures in flight and the lag figures (last committed step).
#include "capture/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/training_rig.h"
#include "trainsnap/checkpointer.h"

namespace trainsnap {
namespace {

using capture_test::Fingerprint;
using capture_test::FirstDifference;
using capture_test::Opt;
using capture_test::Rig;
using capture_test::SetCpuRngState;
using capture_test::TempStore;

// Restores `step` into a fresh rig and compares with `expected`.
void ExpectRestoresTo(Store& store, int64_t step, Opt kind, const std::map<std::string, torch::Tensor>& expected) {
  Rig target(kind);  // same frozen base (seed) as the captured rig
  target.MicroStep();  // give the target optimizer state to overwrite
  Checkpointer reader(store);
  Status s = reader.Restore(step, target.State());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(FirstDifference(expected, Fingerprint(target.State())), "") << "step " << step;
}

// Slows every encode down for the scope of a test.
struct SlowEncoder {
  explicit SlowEncoder(int ms) : SlowEncoder([ms](int64_t) { return std::chrono::milliseconds(ms); }) {}
  explicit SlowEncoder(std::function<std::chrono::milliseconds(int64_t)> delay) {
    internal::CapturePipeline::SetEncodeDelayForTesting(std::move(delay));
  }
  ~SlowEncoder() { internal::CapturePipeline::SetEncodeDelayForTesting({}); }
};

TEST(PipelineTest, TrainingMayModifyEveryTensorRightAfterCaptureAsync) {
  for (Opt kind : {Opt::kAdam, Opt::kSgdMomentum}) {
    TempStore ts;
    Rig rig(kind);
    SlowEncoder slow(30);  // the encodes run well after training moved on
    Checkpointer checkpointer(*ts.store);
    std::vector<std::map<std::string, torch::Tensor>> expected;
    std::vector<CaptureHandle> handles;
    for (int64_t step = 1; step <= 7; ++step) {
      rig.MicroStep();  // steps 3 and 6 end a window (optimizer step, zero_grad); others leave pending gradients
      expected.push_back(Fingerprint(rig.State()));
      auto handle = checkpointer.CaptureAsync(step, rig.State());
      ASSERT_TRUE(handle.ok()) << handle.status().ToString();
      EXPECT_EQ(handle->step(), step);
      handles.push_back(*handle);
      // Overwrite parameters, gradients and optimizer state in place at once.
      torch::NoGradGuard no_grad;
      for (auto& p : capture_test::Trainable(*rig.model)) {
        p.add_(1.0);
        if (p.grad().defined()) p.mutable_grad().mul_(-3.0);
      }
      for (auto& [key, state] : rig.optimizer->state()) {
        if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(state.get())) {
          adam->exp_avg().fill_(7.0);
          adam->exp_avg_sq().zero_();
        } else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(state.get())) {
          sgd->momentum_buffer().fill_(-1.0);
        }
      }
      // Undo, so that training continues with the true values.
      for (auto& p : capture_test::Trainable(*rig.model)) {
        p.sub_(1.0);
        if (p.grad().defined()) p.mutable_grad().div_(-3.0);
      }
    }
    for (CaptureHandle& handle : handles) {
      Status s = handle.Wait();
      EXPECT_TRUE(s.ok()) << s.ToString();
      EXPECT_TRUE(handle.Ready());
    }
    ASSERT_TRUE(checkpointer.Flush().ok());
    torch::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
    for (int64_t step = 1; step <= 7; ++step) {
      // The optimizer state was overwritten after the capture: compare with
      // capture-time clones only through the restore.
      std::map<std::string, torch::Tensor> want = expected[step - 1];
      ExpectRestoresTo(*ts.store, step, kind, want);
    }
    SetCpuRngState(rng);
  }
}

TEST(PipelineTest, CommitsInOrderAndAFailureInTheMiddleLeavesTheOthers) {
  TempStore ts;
  Rig rig(Opt::kAdam);
  CheckpointerOptions options;
  options.threads = 6;  // every encode runs at once
  options.max_captures_in_flight = 0;  // all five in flight at once
  Checkpointer checkpointer(*ts.store, options);
  // Later steps encode faster: the encodes finish in reverse order (step 15
  // first, 400 ms before step 11), the commits must not.
  SlowEncoder slow([](int64_t step) { return std::chrono::milliseconds(20 + 100 * (15 - step)); });
  std::vector<CaptureHandle> handles;
  for (int64_t step : {11, 12, 13, 14, 15}) {
    rig.MicroStep();
    auto handle = checkpointer.CaptureAsync(step, rig.State());
    ASSERT_TRUE(handle.ok()) << handle.status().ToString();
    handles.push_back(*handle);
  }
  // Another writer commits step 13 while this one's capture of it waits
  // (encoded after 220 ms, behind step 11 at 420 ms): AlreadyExists at its commit.
  rig.MicroStep();
  ASSERT_TRUE(Checkpointer(*ts.store).Capture(13, rig.State()).ok());
  // Step 11 is the slowest: nothing after it can have committed before it.
  ASSERT_TRUE(handles[0].Wait().ok());
  Status flushed = checkpointer.Flush();
  EXPECT_EQ(flushed.code(), StatusCode::kAlreadyExists) << flushed.ToString();
  EXPECT_NE(flushed.ToString().find("capture step 13"), std::string::npos) << flushed.ToString();
  for (size_t i = 0; i < handles.size(); ++i) {
    EXPECT_TRUE(handles[i].Ready());
    EXPECT_EQ(handles[i].Wait().code(), i == 2 ? StatusCode::kAlreadyExists : StatusCode::kOk) << i;
  }
  EXPECT_TRUE(checkpointer.Flush().ok());  // the error was reported once
  auto list = ts.store->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 5u);
  std::map<int64_t, int64_t> created;
  for (const SnapshotInfo& info : *list) created[info.step] = info.created_unix_ms;
  // Committed in capture order although encoded in reverse order.
  EXPECT_LE(created[11], created[12]);
  EXPECT_LE(created[12], created[14]);
  EXPECT_LE(created[14], created[15]);
}

TEST(PipelineTest, StagingStaysWithinTheBoundUnderASlowEncoder) {
  TempStore ts;
  Rig rig(Opt::kAdam);
  for (int i = 0; i < 3; ++i) rig.MicroStep();  // optimizer state exists
  rig.MicroStep();                             // pending gradients
  CheckpointerOptions options;
  options.skip_unchanged = false;  // stage every tensor every time
  options.max_staging_bytes = 3 * 4096 * 4;  // 16 tensors of 4096-byte class per snapshot: < 1 snapshot
  Checkpointer checkpointer(*ts.store, options);
  SlowEncoder slow(40);
  std::vector<CaptureHandle> handles;
  for (int64_t step = 1; step <= 6; ++step) {
    auto handle = checkpointer.CaptureAsync(step, rig.State());
    ASSERT_TRUE(handle.ok()) << handle.status().ToString();
    handles.push_back(*handle);
  }
  ASSERT_TRUE(checkpointer.Flush().ok());
  PipelineStats stats = checkpointer.pipeline_stats();
  // One snapshot stages 16 tensors (4 adapters, their gradients, exp_avg and
  // exp_avg_sq) of 256 bytes, each in a 4096-byte class: 64 KiB, larger than
  // the 48 KiB bound, so every capture is admitted alone.
  EXPECT_EQ(stats.max_staging_bytes, 3u * 4096 * 4);
  EXPECT_EQ(stats.staging_peak_bytes, 16u * 4096);
  EXPECT_GT(stats.staging_waits, 0u);
  EXPECT_EQ(stats.staging_in_use_bytes, 0u);
  EXPECT_GT(stats.staging_reuses, 0u);
  EXPECT_LE(stats.staging_cached_bytes, stats.max_staging_bytes);
  for (CaptureHandle& handle : handles) EXPECT_TRUE(handle.Wait().ok());
}

TEST(PipelineTest, PeakStagingNeverExceedsTheBound) {
  TempStore ts;
  Rig rig(Opt::kAdam);
  for (int i = 0; i < 4; ++i) rig.MicroStep();
  CheckpointerOptions options;
  options.skip_unchanged = false;
  options.max_staging_bytes = 40 * 4096;  // room for two snapshots of 16 buffers, not three
  Checkpointer checkpointer(*ts.store, options);
  SlowEncoder slow(40);
  for (int64_t step = 1; step <= 8; ++step) {
    auto handle = checkpointer.CaptureAsync(step, rig.State());
    ASSERT_TRUE(handle.ok()) << handle.status().ToString();
    PipelineStats now = checkpointer.pipeline_stats();
    EXPECT_LE(now.staging_in_use_bytes, options.max_staging_bytes);
  }
  ASSERT_TRUE(checkpointer.Flush().ok());
  PipelineStats stats = checkpointer.pipeline_stats();
  EXPECT_LE(stats.staging_peak_bytes, options.max_staging_bytes);
  EXPECT_GE(stats.staging_peak_bytes, 32u * 4096);  // two in flight at once
  EXPECT_GT(stats.staging_waits, 0u);               // the third one waited
  auto list = ts.store->List();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 8u);
}

TEST(PipelineTest, LargeCpuTensorsAreCopiedInRangesBitExactly) {
  TempStore ts;
  torch::manual_seed(5);
  torch::nn::Linear model(1500, 1500);  // 9 MB weight: above the parallel-copy threshold
  auto optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
  TrainingState state;
  state.model = model.ptr().get();
  state.optimizer = optimizer.get();
  Checkpointer checkpointer(*ts.store);
  torch::Tensor weight = model->weight.detach().clone();
  auto handle = checkpointer.CaptureAsync(1, state);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  {
    torch::NoGradGuard no_grad;
    model->weight.fill_(0.25);
  }
  ASSERT_TRUE(handle->Wait().ok());
  auto records = ts.store->Tensors(1);
  ASSERT_TRUE(records.ok());
  bool found = false;
  for (const TensorRecord& record : *records) {
    if (record.bytes != static_cast<uint64_t>(weight.nbytes())) continue;
    torch::Tensor read = torch::empty_like(weight);
    ASSERT_TRUE(ts.store->ReadTensor(record, read.data_ptr(), read.nbytes()).ok());
    EXPECT_TRUE(capture_test::BitwiseEqual(read, weight));
    found = true;
  }
  EXPECT_TRUE(found);
}

TEST(PipelineTest, StagingErrorsReturnFromCaptureAsyncAndCountInFlush) {
  TempStore ts;
  Rig rig(Opt::kAdam);
  TrainingState state = rig.State();
  state.extra["null"] = nullptr;
  Checkpointer checkpointer(*ts.store);
  auto handle = checkpointer.CaptureAsync(1, state);
  ASSERT_FALSE(handle.ok());
  EXPECT_EQ(handle.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(checkpointer.Flush().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(checkpointer.Flush().ok());
  EXPECT_EQ(CaptureHandle().Wait().code(), StatusCode::kInvalidArgument);
}

TEST(PipelineTest, DestructorWaitsForCapturesInFlight) {
  TempStore ts;
  Rig rig(Opt::kAdamW);
  rig.MicroStep();
  std::map<std::string, torch::Tensor> expected = Fingerprint(rig.State());
  {
    SlowEncoder slow(50);
    Checkpointer checkpointer(*ts.store);
    ASSERT_TRUE(checkpointer.CaptureAsync(10, rig.State()).ok());
  }
  auto latest = ts.store->Latest();
  ASSERT_TRUE(latest.ok());
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ(**latest, 10);
  torch::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
  ExpectRestoresTo(*ts.store, 10, Opt::kAdamW, expected);
  SetCpuRngState(rng);
}

// Destroying the Store under a Checkpointer with a capture in flight aborts
// with a message (checkpointer.h) instead of a use after free.
TEST(PipelineDeathTest, DestroyingTheStoreWithCapturesInFlightAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the pipeline runs threads
  // The child re-executes this test from the start; it takes the parent's
  // store path from the environment, so that the parent removes what the
  // aborted child leaves behind.
  const char* inherited = std::getenv("TRAINSNAP_DEATH_TEST_STORE");
  const std::string path =
      inherited != nullptr ? std::string(inherited)
                           : (std::filesystem::temp_directory_path() /
                              ("trainsnap_pipeline_death_" + std::to_string(::getpid())))
                                 .string();
  ASSERT_EQ(setenv("TRAINSNAP_DEATH_TEST_STORE", path.c_str(), 1), 0);
  EXPECT_DEATH(
      {
        StoreOptions options;
        options.sync = false;
        std::unique_ptr<Store> store = Store::Open(path, options).value();
        Rig rig(Opt::kAdam);
        SlowEncoder slow(5000);
        auto* checkpointer = new Checkpointer(*store);  // outlives its store: the misuse
        (void)checkpointer->CaptureAsync(3, rig.State());
        store.reset();
      },
      "trainsnap: Store .* destroyed while a Checkpointer still has captures in flight \\(capture step 3\\); "
      "call Checkpointer::Flush\\(\\) or destroy the Checkpointer before its Store");
  unsetenv("TRAINSNAP_DEATH_TEST_STORE");
  std::filesystem::remove_all(path);
}

TEST(PipelineTest, StoreMayBeDestroyedOnceCapturesAreFlushed) {
  TempStore ts;
  Rig rig(Opt::kAdam);
  SlowEncoder slow(20);
  Checkpointer checkpointer(*ts.store);
  ASSERT_TRUE(checkpointer.CaptureAsync(1, rig.State()).ok());
  ASSERT_TRUE(checkpointer.Flush().ok());
  ts.Close();  // no capture in flight: no abort, even with the Checkpointer alive
  ts.Open();
  auto latest = ts.store->Latest();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->value_or(-1), 1);
}

// CheckpointerOptions::max_captures_in_flight under a slow encoder: the
// highest number of captures in flight seen right after each CaptureAsync.
size_t PeakInFlight(int max_captures_in_flight, PipelineStats* final_stats) {
  TempStore ts;
  Rig rig(Opt::kAdam);
  rig.MicroStep();
  CheckpointerOptions options;
  options.max_captures_in_flight = max_captures_in_flight;
  options.threads = 8;  // the encodes could all run at once
  Checkpointer checkpointer(*ts.store, options);
  EXPECT_FALSE(checkpointer.pipeline_stats().last_committed_step.has_value());
  SlowEncoder slow(60);
  size_t peak = 0;
  for (int64_t step = 1; step <= 8; ++step) {
    auto handle = checkpointer.CaptureAsync(step, rig.State());
    EXPECT_TRUE(handle.ok()) << handle.status().ToString();
    peak = std::max(peak, checkpointer.pipeline_stats().captures_in_flight);
  }
  EXPECT_TRUE(checkpointer.Flush().ok());
  *final_stats = checkpointer.pipeline_stats();
  return peak;
}

TEST(PipelineTest, CapturesInFlightStayWithinTheBoundInSteps) {
  EXPECT_EQ(CheckpointerOptions().max_captures_in_flight, 4);
  PipelineStats bounded, unbounded;
  EXPECT_EQ(PeakInFlight(2, &bounded), 2u);
  EXPECT_EQ(bounded.max_captures_in_flight, 2u);
  // Captures 3..8 may each wait for a slot; how many did depends on when the
  // 60 ms encodes finish, but with a bound of 2 and 8 captures some must.
  EXPECT_GE(bounded.capture_waits, 1u);
  EXPECT_LE(bounded.capture_waits, 6u);
  EXPECT_EQ(bounded.captures_in_flight, 0u);
  EXPECT_EQ(bounded.last_committed_step, std::optional<int64_t>(8));
  // Without the bound (0) the loop runs ahead of the 60 ms encodes.
  EXPECT_GT(PeakInFlight(0, &unbounded), 2u);
  EXPECT_EQ(unbounded.max_captures_in_flight, 0u);
  EXPECT_EQ(unbounded.capture_waits, 0u);
  EXPECT_EQ(unbounded.last_committed_step, std::optional<int64_t>(8));
}

TEST(PipelineTest, LastCommittedStepIsSetOnceTheHandleIsReady) {
  TempStore ts;
  Rig rig(Opt::kAdamW);
  rig.MicroStep();
  Checkpointer checkpointer(*ts.store);
  SlowEncoder slow(300);
  auto first = checkpointer.CaptureAsync(40, rig.State());
  ASSERT_TRUE(first.ok());
  auto second = checkpointer.CaptureAsync(41, rig.State());
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(checkpointer.pipeline_stats().captures_in_flight, 2u);
  ASSERT_TRUE(first->Wait().ok());
  EXPECT_GE(checkpointer.pipeline_stats().last_committed_step.value_or(-1), 40);
  ASSERT_TRUE(second->Wait().ok());
  EXPECT_EQ(checkpointer.pipeline_stats().last_committed_step, std::optional<int64_t>(41));
  // A failed capture does not move it.
  EXPECT_EQ(checkpointer.CaptureAsync(41, rig.State()).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(checkpointer.pipeline_stats().last_committed_step, std::optional<int64_t>(41));
}

TEST(PipelineTest, CaptureOfAStepInFlightFailsInCaptureAsync) {
  TempStore ts;
  Rig rig(Opt::kAdam);
  rig.MicroStep();
  Checkpointer checkpointer(*ts.store);
  SlowEncoder slow(300);
  auto first = checkpointer.CaptureAsync(7, rig.State());
  ASSERT_TRUE(first.ok());
  auto again = checkpointer.CaptureAsync(7, rig.State());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(again.status().message(), "capture step 7: already in flight");
  EXPECT_TRUE(first->Wait().ok());  // the first one is unaffected
  EXPECT_EQ(checkpointer.Flush().code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(checkpointer.Flush().ok());
  EXPECT_EQ(ts.store->List().value().size(), 1u);
}

}  // namespace
}  // namespace trainsnap
