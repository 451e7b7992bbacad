// A failed restore leaves every live object bitwise unchanged: parameters,
// gradients, optimizer state and options, scheduler, window, extra state and
// RNG are fingerprinted before and after, for several kinds of failure.
#include "restore/apply.h"

#include <map>
#include <string_view>

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <torch/torch.h>

#include "testing/training_rig.h"
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

TEST_F(ApplyTest, LoadStateThrowingANonStandardExceptionRollsBackAndIsAborted) {
  struct Throws : Stateful {
    std::string SaveState() const override { return "x"; }
    Status LoadState(std::string_view) override { throw "not a std::exception"; }
  } throws;
  // Captured with a third extra that sorts last, so that the two before it
  // load first and must be rolled back.
  Rig reference(Opt::kAdamW);
  TrainingState state = reference.State();
  state.extra["a_counter"] = &reference_counter_;
  state.extra["z_throws"] = &throws;
  ASSERT_TRUE(Checkpointer(*ts_.store).Capture(9, state).ok());
  TrainingState target = Target();
  target.extra["z_throws"] = &throws;
  const auto before = Fingerprint(target);
  Status status = Checkpointer(*ts_.store).Restore(9, target);
  EXPECT_EQ(status.code(), StatusCode::kAborted);
  EXPECT_EQ(status.message(),
            "restore step 9: extra state `z_throws`: LoadState threw an exception that is not a std::exception");
  EXPECT_EQ(FirstDifference(before, Fingerprint(target)), "");
}

// Targets whose tensors refuse in-place writes: the restore fails before the
// first write, and every parameter, optimizer state, Stateful extra and the
// RNG are bitwise unchanged.
class UnwritableTargetTest : public ::testing::Test {
 protected:
  // w (trainable), frozen (frozen parameter), stats (buffer); `make` builds
  // each tensor so that a test can make one of them unwritable.
  struct Net {
    std::shared_ptr<torch::nn::Module> module = std::make_shared<torch::nn::Module>();
    std::unique_ptr<torch::optim::Adam> optimizer;
    Cursor cursor;
    TrainingState State() {
      TrainingState state;
      state.model = module.get();
      state.optimizer = optimizer.get();
      state.extra["cursor"] = &cursor;
      return state;
    }
  };
  static Net MakeNet(const torch::Tensor& w, const torch::Tensor& frozen, const torch::Tensor& stats) {
    Net net;
    torch::Tensor param = net.module->register_parameter("w", w);
    net.module->register_parameter("frozen", frozen, /*requires_grad=*/false);
    net.module->register_buffer("stats", stats);
    net.optimizer = std::make_unique<torch::optim::Adam>(std::vector<torch::Tensor>{param});
    return net;
  }
  static void Train(Net& net) {
    net.module->named_parameters()["w"].sum().mul(2).backward();
    net.optimizer->step();
    net.cursor.position += 3;
  }
  void SetUp() override {
    torch::manual_seed(5);
    Net source = MakeNet(torch::randn({3, 4}), torch::randn({6}), torch::randn({5}));
    Train(source);
    Train(source);
    CheckpointerOptions options;
    options.model_state = ModelState::kFull;
    ASSERT_TRUE(Checkpointer(*ts_.store, options).Capture(1, source.State()).ok());
  }
  // Fingerprint, with sparse tensors made dense so that they compare bytewise.
  static std::map<std::string, torch::Tensor> DenseFingerprint(const TrainingState& state) {
    auto out = Fingerprint(state);
    for (auto& [key, value] : out) {
      if (value.is_sparse()) value = value.to_dense();
    }
    return out;
  }
  void ExpectRefusedUnchanged(Net& target, StatusCode code, const std::string& message) {
    Train(target);  // optimizer state and a cursor to protect
    CheckpointerOptions options;
    options.model_state = ModelState::kFull;
    const auto before = DenseFingerprint(target.State());
    Status status = Checkpointer(*ts_.store, options).Restore(1, target.State());
    EXPECT_EQ(status.code(), code) << status.ToString();
    EXPECT_EQ(status.message(), message);
    EXPECT_EQ(FirstDifference(before, DenseFingerprint(target.State())), "");
    EXPECT_EQ(target.cursor.position, 3);
  }
  TempStore ts_;
};

TEST_F(UnwritableTargetTest, InferenceModeBufferIsRefusedBeforeAnyWrite) {
  torch::Tensor stats;
  {
    c10::InferenceMode inference;
    stats = torch::zeros({5});
  }
  Net target = MakeNet(torch::zeros({3, 4}), torch::zeros({6}), stats);
  ExpectRefusedUnchanged(target, StatusCode::kInvalidArgument,
                         "restore step 1: buffer `stats` of the target is an inference tensor (created under "
                         "c10::InferenceMode), which LibTorch does not let restore write in place outside "
                         "InferenceMode; nothing was restored");
}

TEST_F(UnwritableTargetTest, InferenceModeFrozenParameterIsRefusedBeforeAnyWrite) {
  torch::Tensor frozen;
  {
    c10::InferenceMode inference;
    frozen = torch::zeros({6});
  }
  Net target = MakeNet(torch::zeros({3, 4}), frozen, torch::zeros({5}));
  ExpectRefusedUnchanged(target, StatusCode::kInvalidArgument,
                         "restore step 1: parameter `frozen` of the target is an inference tensor (created under "
                         "c10::InferenceMode), which LibTorch does not let restore write in place outside "
                         "InferenceMode; nothing was restored");
}

TEST_F(UnwritableTargetTest, StrideZeroParameterIsRefusedBeforeAnyWrite) {
  torch::Tensor expanded = torch::zeros({1}).expand({6}).detach();  // a leaf with stride 0
  ASSERT_EQ(expanded.stride(0), 0);
  Net target = MakeNet(torch::zeros({3, 4}), expanded, torch::zeros({5}));
  ExpectRefusedUnchanged(target, StatusCode::kInvalidArgument,
                         "restore step 1: parameter `frozen` of the target has elements that share memory (a stride "
                         "of 0, e.g. from expand()), which an in-place copy refuses; nothing was restored");
}

TEST_F(UnwritableTargetTest, SparseBufferIsNotSupportedBeforeAnyWrite) {
  Net target = MakeNet(torch::zeros({3, 4}), torch::zeros({6}), torch::zeros({5}).to_sparse());
  ExpectRefusedUnchanged(target, StatusCode::kNotSupported,
                         "restore step 1: buffer `stats` of the target has layout Sparse; nothing was restored");
}

TEST_F(UnwritableTargetTest, WritableTargetRestoresBitwise) {
  torch::manual_seed(5);
  Net expected = MakeNet(torch::randn({3, 4}), torch::randn({6}), torch::randn({5}));
  Train(expected);
  Train(expected);
  Net target = MakeNet(torch::zeros({3, 4}), torch::zeros({6}), torch::zeros({5}));
  Train(target);
  CheckpointerOptions options;
  options.model_state = ModelState::kFull;
  TrainingState state = target.State();
  state.rng = false;
  ASSERT_TRUE(Checkpointer(*ts_.store, options).Restore(1, state).ok());
  TrainingState want = expected.State();
  want.rng = false;
  auto a = Fingerprint(want), b = Fingerprint(state);
  a.erase("rng#cpu");
  b.erase("rng#cpu");
  EXPECT_EQ(FirstDifference(a, b), "");
}

}  // namespace
}  // namespace trainsnap
