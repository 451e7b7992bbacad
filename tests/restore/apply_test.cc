// A failed restore leaves every live object bitwise unchanged: parameters,
// gradients, optimizer state and options, scheduler, window, extra state and
// RNG are fingerprinted before and after, for several kinds of failure.
#include "restore/apply.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <torch/torch.h>

#include "capture/training_rig.h"
#include "trainsnap/checkpointer.h"

namespace trainsnap {
namespace {

using capture_test::Cursor;
using capture_test::Fingerprint;
using capture_test::FirstDifference;
using capture_test::Opt;
using capture_test::Rig;
using capture_test::TempStore;
using capture_test::Trainable;

class ApplyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Rig reference(Opt::kAdamW);
    for (int i = 0; i < 7; ++i) reference.MicroStep();
    TrainingState state = reference.State();
    state.extra["a_counter"] = &reference_counter_;
    reference_counter_.position = 1000;
    ASSERT_TRUE(Checkpointer(*ts_.store).Capture(7, state).ok());
    target_ = std::make_unique<Rig>(Opt::kAdamW);
    for (int i = 0; i < 4; ++i) target_->MicroStep();
    target_counter_.position = 5;
  }
  TrainingState Target() {
    TrainingState state = target_->State();
    state.extra["a_counter"] = &target_counter_;
    return state;
  }
  // Flips the last byte of every stored chunk, behind the store's back.
  void CorruptEveryChunk() {
    ts_.Close();
    std::vector<std::string> names;
    ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), ts_.path().string(), &names).ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (const std::string& name : names) descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::DBOptions(), ts_.path().string(), descriptors, &handles, &db).ok());
    size_t chunks_cf = names.size();
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == "chunks") chunks_cf = i;
    }
    ASSERT_LT(chunks_cf, names.size());
    std::vector<std::pair<std::string, std::string>> chunks;
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), handles[chunks_cf]));
    for (it->SeekToFirst(); it->Valid(); it->Next()) chunks.emplace_back(it->key().ToString(), it->value().ToString());
    ASSERT_TRUE(it->status().ok());
    it.reset();
    ASSERT_FALSE(chunks.empty());
    for (auto& [key, value] : chunks) {
      value.back() = static_cast<char>(value.back() ^ 0x5a);
      ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), handles[chunks_cf], key, value).ok());
    }
    for (auto* handle : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(handle).ok());
    ASSERT_TRUE(db->Close().ok());
    delete db;
    ts_.Open();
  }
  void ExpectFailsUnchanged(StatusCode code, const CheckpointerOptions& options = {}) {
    const auto before = Fingerprint(Target());
    Status status = Checkpointer(*ts_.store, options).Restore(7, Target());
    EXPECT_EQ(status.code(), code) << status.ToString();
    EXPECT_EQ(FirstDifference(before, Fingerprint(Target())), "");
  }
  TempStore ts_;
  Cursor reference_counter_, target_counter_;
  std::unique_ptr<Rig> target_;
};

TEST_F(ApplyTest, SucceedsOnAnIntactStore) {
  Status status = Checkpointer(*ts_.store).Restore(7, Target());
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(target_counter_.position, 1000);
  EXPECT_EQ(target_->cursor.position, 7);
}

TEST_F(ApplyTest, CorruptedChunkLeavesEverythingUnchanged) {
  CorruptEveryChunk();
  ExpectFailsUnchanged(StatusCode::kCorruption);
}

TEST_F(ApplyTest, RefusedExtraStateRollsBackAndLeavesEverythingUnchanged) {
  // "a_counter" loads first, then "cursor" refuses: a_counter gets its
  // previous state back.
  target_->cursor.refuse = true;
  const auto before = Fingerprint(Target());
  Status status = Checkpointer(*ts_.store).Restore(7, Target());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "restore step 7: extra state `cursor`: cursor refuses to load");
  EXPECT_EQ(target_counter_.position, 5);
  EXPECT_EQ(FirstDifference(before, Fingerprint(Target())), "");
}

TEST_F(ApplyTest, BaseLabelMismatchLeavesEverythingUnchanged) {
  CheckpointerOptions labelled;
  labelled.base_label = "other";
  Rig reference(Opt::kAdamW);
  TrainingState state = reference.State();
  state.extra["a_counter"] = &reference_counter_;
  ASSERT_TRUE(Checkpointer(*ts_.store, labelled).Capture(8, state).ok());
  const auto before = Fingerprint(Target());
  EXPECT_EQ(Checkpointer(*ts_.store).Restore(8, Target()).code(), StatusCode::kContractMismatch);
  EXPECT_EQ(FirstDifference(before, Fingerprint(Target())), "");
}

TEST_F(ApplyTest, GroupMismatchLeavesEverythingUnchanged) {
  auto params = Trainable(*target_->model);
  params.pop_back();
  target_->scheduler.reset();
  target_->optimizer = std::make_unique<torch::optim::AdamW>(params);
  target_->scheduler = std::make_unique<torch::optim::StepLR>(*target_->optimizer, 2, 0.5);
  target_->optimizer->step();  // some state to protect
  ExpectFailsUnchanged(StatusCode::kContractMismatch);
}

TEST_F(ApplyTest, ShapeMismatchLeavesEverythingUnchanged) {
  torch::NoGradGuard guard;
  target_->model->l2->lora_b.set_data(torch::zeros({16, 5}));
  ExpectFailsUnchanged(StatusCode::kContractMismatch);
}

}  // namespace
}  // namespace trainsnap
