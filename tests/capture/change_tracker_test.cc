// ChangeTracker: every in-place update through ATen is seen as a change; raw
// pointer writes are not (the documented limitation), and turning
// CheckpointerOptions::skip_unchanged off captures them.
#include "capture/change_tracker.h"

#include <functional>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/training_rig.h"
#include "trainsnap/checkpointer.h"

namespace trainsnap::internal {
namespace {

using capture_test::BitwiseEqual;
using capture_test::Fingerprint;
using capture_test::FirstDifference;
using capture_test::Opt;
using capture_test::Rig;
using capture_test::TempStore;

// Observes `t` in a committed capture of step 1, applies `op`, and returns
// what the capture of step 2 would reuse.
std::optional<int64_t> AfterOp(torch::Tensor& t, const std::function<void(torch::Tensor&)>& op) {
  ChangeTracker tracker;
  EXPECT_FALSE(tracker.Observe(1, 7, "param", t).has_value());  // never seen
  tracker.Committed(1);
  op(t);
  return tracker.Observe(2, 7, "param", t);
}

TEST(ChangeTrackerTest, EveryInPlaceUpdateIsAChange) {
  const std::vector<std::pair<std::string, std::function<void(torch::Tensor&)>>> ops = {
      {"add_", [](torch::Tensor& t) { t.add_(1); }},
      {"mul_", [](torch::Tensor& t) { t.mul_(2); }},
      {"copy_", [](torch::Tensor& t) { t.copy_(torch::ones_like(t)); }},
      {"zero_", [](torch::Tensor& t) { t.zero_(); }},
      {"fill_", [](torch::Tensor& t) { t.fill_(3); }},
      {"index_put_", [](torch::Tensor& t) { t.index_put_({0}, 5.0); }},
      {"view add_", [](torch::Tensor& t) { t.view({-1}).narrow(0, 1, 2).add_(1); }},
      {"detach add_", [](torch::Tensor& t) { t.detach().add_(1); }},
      {"set_data", [](torch::Tensor& t) { t.set_data(torch::randn({4, 3})); }},
      {"assign a new tensor", [](torch::Tensor& t) { t = torch::randn({4, 3}); }},
      {"assign a copy", [](torch::Tensor& t) { t = t.clone(); }},
      {"resize", [](torch::Tensor& t) { t.resize_({2, 3}); }},
      {"half precision", [](torch::Tensor& t) { t = t.to(torch::kHalf); }},
  };
  for (const auto& [name, op] : ops) {
    torch::NoGradGuard no_grad;
    torch::Tensor t = torch::randn({4, 3});
    EXPECT_FALSE(AfterOp(t, op).has_value()) << name;
  }
  torch::Tensor t = torch::randn({4, 3});
  EXPECT_EQ(AfterOp(t, [](torch::Tensor&) {}), std::optional<int64_t>(1));
  // Reads do not count as changes.
  EXPECT_EQ(AfterOp(t, [](torch::Tensor& x) { (void)x.sum().item<float>(); }), std::optional<int64_t>(1));
}

TEST(ChangeTrackerTest, OptimizerStepAndZeroGradAreChanges) {
  torch::Tensor p = torch::randn({5}, torch::requires_grad());
  torch::optim::SGD sgd({p}, torch::optim::SGDOptions(0.1));
  (p * p).sum().backward();
  ChangeTracker tracker;
  tracker.Observe(1, 1, "param", p);
  tracker.Observe(1, 1, "grad", p.grad());
  tracker.Committed(1);
  // A tensor that requires grad is never reused, even untouched (SGD writes
  // parameters through .data(), which the version counter does not see).
  EXPECT_FALSE(tracker.Observe(2, 1, "param", p).has_value());
  sgd.step();
  EXPECT_FALSE(tracker.Observe(2, 1, "param", p).has_value());
  EXPECT_EQ(tracker.Observe(2, 1, "grad", p.grad()), std::optional<int64_t>(1));
  tracker.Committed(2);
  sgd.zero_grad();
  EXPECT_FALSE(tracker.Observe(3, 1, "grad", p.grad()).has_value());
  // A new backward into a zeroed grad accumulates in place: a change too.
  tracker.Committed(3);
  (p * p).sum().backward();
  EXPECT_FALSE(tracker.Observe(4, 1, "grad", p.grad()).has_value());
}

// The documented limitation: the version counter does not see raw writes,
// nor writes through `.data()` (a detached alias with its own counter).
TEST(ChangeTrackerTest, RawPointerAndDataAliasWritesAreNotSeen) {
  torch::Tensor t = torch::randn({4, 3});
  EXPECT_EQ(AfterOp(t, [](torch::Tensor& x) { x.data_ptr<float>()[0] = 42.f; }), std::optional<int64_t>(1));
  EXPECT_EQ(AfterOp(t, [](torch::Tensor& x) { x.data().add_(1); }), std::optional<int64_t>(1));
}

TEST(ChangeTrackerTest, OnlyCommittedCapturesAreReferencesAndDeletedStepsReset) {
  TempStore ts;
  torch::Tensor t = torch::randn({3});
  ChangeTracker tracker;
  ASSERT_TRUE(tracker.BeginCapture(*ts.store, 1).ok());
  tracker.Observe(1, 1, "param", t);
  tracker.Abandoned(1);  // a failed capture is no reference
  EXPECT_FALSE(tracker.Observe(2, 1, "param", t).has_value());
  tracker.Committed(2);
  EXPECT_EQ(tracker.Observe(3, 1, "param", t), std::optional<int64_t>(2));
  EXPECT_FALSE(tracker.Observe(3, 1, "exp_avg", t).has_value());  // another role
  EXPECT_FALSE(tracker.Observe(3, 2, "param", t).has_value());     // another id
  // Step 2 is not in the store: BeginCapture forgets it.
  ASSERT_TRUE(tracker.BeginCapture(*ts.store, 3).ok());
  EXPECT_FALSE(tracker.Observe(3, 1, "param", t).has_value());
  tracker.Committed(3);
  EXPECT_EQ(tracker.Observe(4, 1, "param", t), std::optional<int64_t>(3));
  tracker.Reset();
  EXPECT_FALSE(tracker.Observe(5, 1, "param", t).has_value());
}

// A training loop with a capture after every micro-step: every snapshot
// restores to exactly the state it captured (no update is ever missed), and
// the frozen base is added by reference.
TEST(ChangeTrackerTest, CheckpointerNeverMissesAnUpdate) {
 for (Opt kind : {Opt::kAdamW, Opt::kSgdMomentum, Opt::kRmsProp, Opt::kAdagrad}) {
  SCOPED_TRACE(static_cast<int>(kind));
  TempStore ts;
  Rig rig(kind);
  CheckpointerOptions options;
  options.model_state = ModelState::kFull;
  Checkpointer checkpointer(*ts.store, options);
  std::vector<std::map<std::string, torch::Tensor>> captured;
  for (int step = 1; step <= 7; ++step) {
    rig.MicroStep();
    ASSERT_TRUE(checkpointer.Capture(step, rig.State()).ok());
    captured.push_back(Fingerprint(rig.State()));
  }
  // Frozen parameters: the same chunk lists in every snapshot, nothing new.
  auto first = ts.store->Tensors(1);
  auto last = ts.store->Tensors(7);
  ASSERT_TRUE(first.ok() && last.ok());
  int frozen_seen = 0;
  for (const TensorRecord& a : *first) {
    for (const TensorRecord& b : *last) {
      if (a.param_id != b.param_id || a.role != b.role || a.role != "param") continue;
      if (a.chunks.size() == b.chunks.size() && a.chunks[0].hash == b.chunks[0].hash) ++frozen_seen;
    }
  }
  EXPECT_EQ(frozen_seen, 4);  // l1/l2 base weight and bias
  for (int step = 1; step <= 7; ++step) {
    Rig other(kind, /*seed=*/99);
    Checkpointer reader(*ts.store, options);
    ASSERT_TRUE(reader.Restore(step, other.State()).ok()) << step;
    auto restored = Fingerprint(other.State());
    // The RNG state is restored only when asked; compare everything else.
    std::string diff = FirstDifference(captured[step - 1], restored);
    EXPECT_TRUE(diff.empty() || diff.rfind("rng", 0) == 0) << "step " << step << ": " << diff;
  }
 }
}

// Raw writes are missed with skip_unchanged (documented), captured without it.
TEST(ChangeTrackerTest, SkipUnchangedOffCapturesRawPointerWrites) {
  for (bool skip : {true, false}) {
    SCOPED_TRACE(skip ? "skip_unchanged" : "no skip");
    TempStore ts;
    Rig rig(Opt::kAdam);
    CheckpointerOptions options;
    options.model_state = ModelState::kFull;
    options.skip_unchanged = skip;
    Checkpointer checkpointer(*ts.store, options);
    ASSERT_TRUE(checkpointer.Capture(1, rig.State()).ok());
    torch::Tensor weight = rig.model->l1->base->weight;
    const torch::Tensor before = weight.detach().clone();
    weight.data_ptr<float>()[0] += 1.f;  // no version bump
    const torch::Tensor after = weight.detach().clone();
    ASSERT_TRUE(checkpointer.Capture(2, rig.State()).ok());
    Rig other(Opt::kAdam, /*seed=*/5);
    ASSERT_TRUE(Checkpointer(*ts.store, options).Restore(2, other.State()).ok());
    EXPECT_TRUE(BitwiseEqual(other.model->l1->base->weight, skip ? before : after));
  }
}

// Retention keeping only the newest snapshot, asynchronous captures back to
// back: a capture staged while its predecessor is in flight reuses frozen
// records of an older snapshot, which the predecessor's commit prunes. The
// records are read at staging time, so every capture still commits, and the
// newest restores exactly.
TEST(ChangeTrackerTest, ReusedRecordsSurviveRetentionPruningTheirSource) {
  TempStore ts;
  ts.Close();
  RetentionPolicy keep_one;
  keep_one.keep_last = 1;
  ts.Open(keep_one);
  Rig rig(Opt::kAdamW);
  CheckpointerOptions options;
  options.model_state = ModelState::kFull;
  std::map<std::string, torch::Tensor> last;
  {
    Checkpointer checkpointer(*ts.store, options);
    std::vector<CaptureHandle> handles;
    for (int step = 1; step <= 40; ++step) {
      rig.MicroStep();
      auto handle = checkpointer.CaptureAsync(step, rig.State());
      ASSERT_TRUE(handle.ok()) << handle.status().ToString();
      handles.push_back(*handle);
    }
    last = Fingerprint(rig.State());
    ASSERT_TRUE(checkpointer.Flush().ok());
    for (const CaptureHandle& h : handles) EXPECT_TRUE(h.Wait().ok()) << h.step() << ": " << h.Wait().ToString();
  }
  auto list = ts.store->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ(list->front().step, 40);
  Rig other(Opt::kAdamW, /*seed=*/99);
  Checkpointer reader(*ts.store, options);
  ASSERT_TRUE(reader.Restore(40, other.State()).ok());
  std::string diff = FirstDifference(last, Fingerprint(other.State()));
  EXPECT_TRUE(diff.empty() || diff.rfind("rng", 0) == 0) << diff;
  auto verify = ts.store->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok());
}

}  // namespace
}  // namespace trainsnap::internal
