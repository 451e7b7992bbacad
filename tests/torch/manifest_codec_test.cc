// The manifest's format version 2: a layout that
// snapshots share and a small per-snapshot part; exact byte counts at 50k
// parameters, the round trip of every per-snapshot field, the checks of a
// part that does not fit its layout, and the checkpointer end to end. (The
// store side at 50k tensors: tests/store/snapshot_writer_test.cc,
// SnapshotWriterSharedManifestTest.)
#include "torch/manifest_codec.h"

#include <map>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/adam_manifest.h"
#include "testing/training_rig.h"
#include "torch/manifest_format.h"
#include "trainsnap/checkpointer.h"

namespace trainsnap {
namespace {

using capture_test::FirstDifference;
using capture_test::Fingerprint;
using capture_test::TempStore;
using google::protobuf::util::MessageDifferencer;
using testing::AdamManifest;

// EncodeManifest consumes its argument: the tests keep theirs to compare.
Result<internal::EncodedManifest> Encode(const proto::TrainingManifest& m) {
  return internal::EncodeManifest(proto::TrainingManifest(m));
}

TEST(ManifestCodecTest, RoundTripsEveryPerSnapshotFieldAndTheLayoutIgnoresThem) {
  proto::TrainingManifest a = AdamManifest(5, 3, 1e-3);
  a.mutable_params(1)->set_grad(proto::GRAD_STORED);
  a.mutable_params(2)->set_grad(proto::GRAD_OMITTED);
  a.mutable_optimizers(0)->mutable_params(4)->set_step(2);
  proto::OptimizerManifest* sgd = a.add_optimizers();
  sgd->set_name("second");
  sgd->set_type("SGD");
  sgd->add_groups()->mutable_options()->set_momentum(0.5);
  sgd->add_groups()->mutable_options()->set_lr(0.25);
  a.mutable_accumulation()->set_micro_step(2);
  a.mutable_accumulation()->set_size(4);
  a.mutable_accumulation()->set_weight_sum(1.5);
  a.set_has_rng(true);
  a.add_rng()->set_device("cpu");
  a.mutable_rng(0)->set_state(std::string(5056, '\x07'));
  proto::ExtraState* extra = a.add_extra();
  extra->set_name("cursor");
  extra->set_state("batch 17");
  proto::ExtraState* python = a.add_extra();
  python->set_name("opt");
  python->set_has_tensors(true);
  python->set_type("torch.optim.AdamW");
  python->set_state("{\"step\": 3}");
  python->add_tensors()->set_name("0.exp_avg");

  auto encoded = Encode(a);
  ASSERT_TRUE(encoded.ok()) << encoded.status().ToString();
  auto back = internal::DecodeManifest(encoded->own, encoded->layout);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  std::string diff;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differencer.Compare(a, *back)) << diff;

  // Another snapshot of the same layout: every per-snapshot field differs,
  // the layout's bytes do not.
  proto::TrainingManifest b = a;
  b.set_step(4);
  b.mutable_params(0)->set_grad(proto::GRAD_STORED);
  for (auto& s : *b.mutable_optimizers(0)->mutable_params()) s.set_step(4);
  b.mutable_optimizers(0)->mutable_groups(0)->mutable_options()->set_lr(5e-4);
  b.mutable_optimizers(1)->mutable_groups(1)->mutable_options()->set_lr(0.125);
  b.mutable_scheduler()->set_step_count(4);
  b.mutable_accumulation()->set_micro_step(3);
  b.mutable_rng(0)->set_state(std::string(5056, '\x08'));
  b.mutable_extra(0)->set_state("batch 18");
  b.mutable_extra(1)->set_state("{\"step\": 4}");
  auto encoded_b = Encode(b);
  ASSERT_TRUE(encoded_b.ok());
  EXPECT_EQ(encoded_b->layout, encoded->layout);
  EXPECT_NE(encoded_b->own, encoded->own);
  auto back_b = internal::DecodeManifest(encoded_b->own, encoded_b->layout);
  ASSERT_TRUE(back_b.ok()) << back_b.status().ToString();
  EXPECT_TRUE(differencer.Compare(b, *back_b)) << diff;
  // A scheduler and an accumulation window stay absent when absent.
  b.clear_scheduler();
  b.clear_accumulation();
  auto without = internal::DecodeManifest(Encode(b)->own, encoded->layout);
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  EXPECT_FALSE(without->has_scheduler());
  EXPECT_FALSE(without->has_accumulation());
}

// 50,000 parameters: the layout is 3.3 MB, the per-snapshot part 49 bytes,
// whatever the step; format version 1 stored 3.5 MB per snapshot.
TEST(ManifestCodecTest, FiftyThousandParametersRepeatOnlyTheirOwnPart) {
  constexpr int kParams = 50000;
  const proto::TrainingManifest m1 = AdamManifest(kParams, 1, 1e-3);
  const proto::TrainingManifest m2 = AdamManifest(kParams, 2, 9e-4);
  auto e1 = Encode(m1);
  auto e2 = Encode(m2);
  ASSERT_TRUE(e1.ok() && e2.ok());
  EXPECT_EQ(e1->layout, e2->layout);
  EXPECT_EQ(e1->layout.size(), 3302048u);
  // format_version (2 bytes), step (2), one grads run (9), one optimizer
  // (31: group options lr + beta1, one steps run), the scheduler (5).
  EXPECT_EQ(e1->own.size(), 49u);
  EXPECT_EQ(e2->own.size(), 49u);
  std::string whole;
  ASSERT_TRUE(m1.SerializeToString(&whole));
  EXPECT_EQ(whole.size(), 3502074u);  // what format version 1 stored per snapshot
  auto back = internal::DecodeManifest(e2->own, e1->layout);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(MessageDifferencer::Equals(*back, m2));
}

TEST(ManifestCodecTest, APartThatDoesNotFitItsLayoutIsCorruptionAndUnknownVersionsNotSupported) {
  const proto::TrainingManifest m = AdamManifest(4, 7, 1e-3);
  auto e = Encode(m);
  ASSERT_TRUE(e.ok());
  proto::SnapshotManifest own;
  ASSERT_TRUE(own.ParseFromString(e->own));
  auto decode = [&](const proto::SnapshotManifest& part, const std::string& layout) {
    return internal::DecodeManifest(part.SerializeAsString(), layout).status();
  };

  proto::SnapshotManifest short_runs = own;
  short_runs.mutable_grads(0)->set_count(3);
  Status s = decode(short_runs, e->layout);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "manifest: gradient state runs cover 3 of the layout's 4 entries");
  proto::SnapshotManifest long_runs = own;
  long_runs.mutable_optimizers(0)->mutable_steps(0)->set_count(5);
  s = decode(long_runs, e->layout);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "manifest: optimizer `` step runs do not cover the layout's 4 entries");
  proto::SnapshotManifest bad_grad = own;
  bad_grad.mutable_grads(0)->set_value(9);
  s = decode(bad_grad, e->layout);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "manifest: gradient state 9 of parameter 0 is unknown");
  proto::SnapshotManifest no_optimizer = own;
  no_optimizer.clear_optimizers();
  s = decode(no_optimizer, e->layout);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "manifest: 0 optimizers, the layout has 1");
  proto::SnapshotManifest extra_group = own;
  extra_group.mutable_optimizers(0)->add_group_options();
  s = decode(extra_group, e->layout);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "manifest: optimizer ``: 2 group options, the layout has 1 groups");
  proto::SnapshotManifest extra_state = own;
  extra_state.add_extra_states("x");
  s = decode(extra_state, e->layout);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "manifest: 1 extra states, the layout has 0");
  s = decode(own, "");
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "manifest: format version 2 without a layout");
  s = decode(own, "\xff\xff garbage");
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "manifest layout does not parse");

  proto::SnapshotManifest future = own;
  future.set_format_version(3);
  s = decode(future, e->layout);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported);
  EXPECT_EQ(s.message(), "manifest format version 3 (this build reads version 2)");

  // Version 1 (the whole TrainingManifest in the snapshot's manifest) is
  // refused like any other: no store this build opens holds one a
  // checkpointer wrote (store format version 6 came with version 2).
  proto::TrainingManifest v1 = m;
  v1.set_format_version(1);
  s = internal::DecodeManifest(v1.SerializeAsString(), "").status();
  EXPECT_EQ(s.code(), StatusCode::kNotSupported);
  EXPECT_EQ(s.message(), "manifest format version 1 (this build reads version 2)");
  // A layout of another version than its snapshot's part.
  proto::TrainingManifest old_layout;
  ASSERT_TRUE(old_layout.ParseFromString(e->layout));
  old_layout.set_format_version(1);
  s = decode(own, old_layout.SerializeAsString());
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "manifest layout has format version 1, the snapshot's part 2");
  s = internal::DecodeManifest(std::string("\xff\xff\xff\xff garbage", 12), e->layout).status();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "manifest does not parse");
}

// 300 parameters: the layout (over 4 KiB) is stored once; later snapshots
// repeat only their own part (the RNG state dominates it), and each restores
// bitwise through the joined manifest.
TEST(ManifestCodecTest, CheckpointerSharesTheLayoutAndRestoresEachSnapshotBitwise) {
  torch::manual_seed(11);
  torch::nn::Sequential model;
  for (int i = 0; i < 150; ++i) model->push_back(torch::nn::Linear(2, 2));
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-2));
  TempStore ts;
  Checkpointer checkpointer(*ts.store);
  TrainingState state;
  state.model = model.ptr().get();
  state.optimizer = &adam;
  std::vector<std::map<std::string, torch::Tensor>> prints;
  for (int step = 1; step <= 3; ++step) {
    adam.zero_grad();
    model->forward(torch::randn({4, 2})).sum().backward();
    adam.step();
    ASSERT_TRUE(checkpointer.Capture(step, state).ok());
    prints.push_back(Fingerprint(state));
  }
  auto layout1 = ts.store->SharedManifest(1);
  auto layout3 = ts.store->SharedManifest(3);
  ASSERT_TRUE(layout1.ok() && layout3.ok());
  EXPECT_GT(layout1->size(), 4096u);
  EXPECT_EQ(*layout1, *layout3);
  auto info = ts.store->Info(3);
  ASSERT_TRUE(info.ok());
  // Only the snapshot's own part is in its record (the layout is a chunk):
  // the CPU generator's 5056-byte state plus a few dozen bytes.
  auto own = ts.store->Manifest(3);
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(info->manifest_bytes, own->size());
  EXPECT_LT(info->manifest_bytes, 5200u);
  EXPECT_GT(info->manifest_bytes, 5056u);
  for (int step : {1, 2}) {
    torch::manual_seed(99);
    torch::nn::Sequential fresh;
    for (int i = 0; i < 150; ++i) fresh->push_back(torch::nn::Linear(2, 2));
    torch::optim::Adam fresh_adam(fresh->parameters(), torch::optim::AdamOptions(1e-2));
    TrainingState target;
    target.model = fresh.ptr().get();
    target.optimizer = &fresh_adam;
    Status restored = checkpointer.Restore(step, target);
    ASSERT_TRUE(restored.ok()) << restored.ToString();
    EXPECT_EQ(FirstDifference(Fingerprint(target), prints[step - 1]), "") << "step " << step;
  }
}

}  // namespace
}  // namespace trainsnap
