// TrainingState::tensor_extra (TensorStateful): named tensors and bytes of an
// object without a built-in adapter, stored like model tensors and handed back
// fresh at restore; composition checks and rollback as for Stateful.
#include <map>
#include <string>
#include <utility>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/training_rig.h"
#include "trainsnap/checkpointer.h"

namespace trainsnap {
namespace {

using capture_test::BitwiseEqual;
using capture_test::TempStore;

// Keeps a state in memory; LoadState may be told to refuse.
class Holder final : public TensorStateful {
 public:
  Status SaveState(TensorState* out) const override {
    if (fail_save) return Status::IOError("holder cannot save");
    *out = state;
    return Status::OK();
  }
  // SaveState hands out the live tensors (as a Python state_dict() does).
  Status LoadState(TensorState in) override {
    ++loads;
    if (refuse) return Status::ContractMismatch("holder refuses");
    if (!in_place) {
      state = std::move(in);
      return Status::OK();
    }
    // Like load_state_dict of a module: copies into the live tensors.
    state.bytes = in.bytes;
    for (auto& [name, tensor] : state.tensors) tensor.copy_(in.tensors.at(name));
    return Status::OK();
  }
  TensorState state;
  bool in_place = false;
  bool refuse = false;
  bool fail_save = false;
  int loads = 0;
};

TensorState Sample(float offset) {
  TensorState s;
  s.type = "test.Holder";
  s.bytes = "meta-" + std::to_string(offset);
  s.tensors["a.weight/exp_avg"] = torch::arange(12, torch::kFloat32).reshape({3, 4}) + offset;
  s.tensors["step"] = torch::tensor(7, torch::kInt64);
  return s;
}

TEST(TensorExtraTest, TensorsAreStoredAsRecordsAndComeBackFreshAndBitwise) {
  TempStore ts;
  Checkpointer checkpointer(*ts.store);
  Holder holder;
  holder.state = Sample(0.5f);
  TrainingState state;
  state.rng = false;
  state.tensor_extra["opt"] = &holder;
  ASSERT_TRUE(checkpointer.Capture(1, state).ok());
  // Changing the live tensor after the capture does not change the snapshot.
  holder.state.tensors["a.weight/exp_avg"].add_(1);

  auto info = ts.store->Info(1);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->tensors, 2u);
  EXPECT_EQ(info->logical_bytes, 12u * 4 + 8);
  auto records = ts.store->Tensors(1);
  ASSERT_TRUE(records.ok());
  for (const TensorRecord& record : *records) EXPECT_EQ(record.role, "extra");

  Holder target;
  target.state = Sample(100.0f);
  TrainingState restore_state;
  restore_state.rng = false;
  restore_state.tensor_extra["opt"] = &target;
  Status restored = checkpointer.Restore(1, restore_state);
  ASSERT_TRUE(restored.ok()) << restored.ToString();
  TensorState expected = Sample(0.5f);
  EXPECT_EQ(target.state.type, "test.Holder");
  EXPECT_EQ(target.state.bytes, expected.bytes);
  ASSERT_EQ(target.state.tensors.size(), 2u);
  for (const auto& [name, tensor] : expected.tensors) {
    EXPECT_TRUE(BitwiseEqual(target.state.tensors.at(name), tensor)) << name;
  }
  // Fresh tensors: not the ones the capture read.
  EXPECT_NE(target.state.tensors.at("step").data_ptr(), holder.state.tensors.at("step").data_ptr());
}

// Two extras captured at step 1 (`first` loads before `second`).
struct TwoHolders {
  TempStore ts;
  Checkpointer checkpointer{*ts.store};
  Holder first, second;
  TrainingState state;
  void CaptureStep1() {
    first.state = Sample(1.0f);
    second.state = Sample(2.0f);
    state.rng = false;
    state.tensor_extra["a_first"] = &first;
    state.tensor_extra["b_second"] = &second;
    ASSERT_TRUE(checkpointer.Capture(1, state).ok());
  }
};

TEST(TensorExtraTest, RefusalRollsBackTheExtrasLoadedBefore) {
  TwoHolders t;
  ASSERT_NO_FATAL_FAILURE(t.CaptureStep1());

  t.first.state = Sample(10.0f);
  t.second.state = Sample(20.0f);
  t.second.refuse = true;
  Status status = t.checkpointer.Restore(1, t.state);
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(status.message(), "restore step 1: extra state `b_second`: holder refuses");
  // `first` loaded the snapshot's state, then got its previous state back.
  EXPECT_EQ(t.first.loads, 2);
  TensorState before = Sample(10.0f);
  EXPECT_EQ(t.first.state.bytes, before.bytes);
  EXPECT_TRUE(BitwiseEqual(t.first.state.tensors.at("a.weight/exp_avg"), before.tensors.at("a.weight/exp_avg")));
}

TEST(TensorExtraTest, RollbackRestoresAnExtraThatLoadsInPlaceIntoTensorsItSavedByReference) {
  TwoHolders t;
  ASSERT_NO_FATAL_FAILURE(t.CaptureStep1());

  t.first.state = Sample(10.0f);
  t.first.in_place = true;
  torch::Tensor live = t.first.state.tensors.at("a.weight/exp_avg");
  t.second.refuse = true;
  Status status = t.checkpointer.Restore(1, t.state);
  EXPECT_EQ(status.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(t.first.loads, 2);
  // The same tensor object, written twice in place: the snapshot's values,
  // then its own from before the restore (a copy, not the aliased tensor).
  EXPECT_TRUE(t.first.state.tensors.at("a.weight/exp_avg").is_same(live));
  EXPECT_TRUE(BitwiseEqual(live, Sample(10.0f).tensors.at("a.weight/exp_avg")));
  EXPECT_TRUE(BitwiseEqual(t.first.state.tensors.at("step"), Sample(10.0f).tensors.at("step")));
  EXPECT_EQ(t.first.state.bytes, Sample(10.0f).bytes);
}

TEST(TensorExtraTest, SaveErrorsAndKindMismatchesAreNamed) {
  TempStore ts;
  Checkpointer checkpointer(*ts.store);
  Holder holder;
  holder.state = Sample(0.0f);
  holder.fail_save = true;
  TrainingState state;
  state.rng = false;
  state.tensor_extra["opt"] = &holder;
  Status failed = checkpointer.Capture(1, state);
  EXPECT_EQ(failed.code(), StatusCode::kIOError);
  EXPECT_EQ(failed.message(), "capture step 1: extra state `opt`: holder cannot save");
  EXPECT_EQ(ts.store->Info(1).status().code(), StatusCode::kNotFound);
  (void)checkpointer.Flush();

  holder.fail_save = false;
  capture_test::Cursor cursor;
  state.extra["opt"] = &cursor;
  Status both = checkpointer.Capture(2, state);
  EXPECT_EQ(both.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(both.message(), "capture step 2: extra state `opt`: is a key of both extra and tensor_extra");
  (void)checkpointer.Flush();

  state.extra.clear();
  ASSERT_TRUE(checkpointer.Capture(3, state).ok());
  TrainingState plain;
  plain.rng = false;
  plain.extra["opt"] = &cursor;
  Status kind = checkpointer.Restore(3, plain);
  EXPECT_EQ(kind.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(kind.message(),
            "restore step 3: extra state `opt`: saved with tensors (tensor_extra), given as extra");
  TrainingState twice = plain;
  twice.tensor_extra["opt"] = &holder;
  Status both_at_restore = checkpointer.Restore(3, twice);
  EXPECT_EQ(both_at_restore.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(both_at_restore.message(), "restore step 3: extra state `opt`: is a key of both extra and tensor_extra");
  TrainingState none;
  none.rng = false;
  Status absent = checkpointer.Restore(3, none);
  EXPECT_EQ(absent.code(), StatusCode::kContractMismatch);
  EXPECT_EQ(absent.message(), "restore step 3: extra state `opt`: in the snapshot, absent from the target");
}

TEST(TensorExtraTest, AKeyWithASlashIsRefusedAtCapture) {
  // ("a/b", "c") and ("a", "b/c") would both be "extra:a/b/c".
  TempStore ts;
  Checkpointer checkpointer(*ts.store);
  Holder slash_in_tensor;
  slash_in_tensor.state.type = "test.Holder";
  slash_in_tensor.state.tensors["b/c"] = torch::ones({2}, torch::kFloat32);
  Holder slash_in_key;
  slash_in_key.state.type = "test.Holder";
  slash_in_key.state.tensors["c"] = torch::zeros({2}, torch::kFloat32);
  TrainingState state;
  state.rng = false;
  state.tensor_extra["a"] = &slash_in_tensor;
  state.tensor_extra["a/b"] = &slash_in_key;
  Status refused = checkpointer.Capture(1, state);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(),
            "capture step 1: extra state `a/b`: the key contains '/', which tensor IDs reserve "
            "(\"extra:<key>/<tensor>\")");
  EXPECT_EQ(ts.store->Info(1).status().code(), StatusCode::kNotFound);
  (void)checkpointer.Flush();

  state.tensor_extra.erase("a/b");
  ASSERT_TRUE(checkpointer.Capture(2, state).ok());
  auto records = ts.store->Tensors(2);
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 1u);
}

}  // namespace
}  // namespace trainsnap
