// Decoding checks every stored tensor against the manifest before restore
// touches anything.
#include "restore/decode.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "capture/encode.h"
#include "store/raw_db.h"
#include "capture/stage.h"
#include "testing/training_rig.h"
#include "trainsnap/checkpointer.h"

namespace trainsnap {
namespace {

using capture_test::Fingerprint;
using capture_test::FirstDifference;
using capture_test::Opt;
using capture_test::Rig;
using capture_test::TempStore;

// Commits snapshot `step` of `rig` without the staged tensor (id, role).
void CommitWithout(Store& store, int64_t step, Rig& rig, uint64_t id, const std::string& role) {
  internal::BaseIdentityBuilder base;
  auto staged = internal::Stage(step, rig.State(), CheckpointerOptions(), base);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  auto writer = store.BeginSnapshot(step);
  ASSERT_TRUE(writer.ok());
  int skipped = 0;
  for (const internal::StagedTensor& tensor : (*staged)->staging.tensors()) {
    if (tensor.param_id == id && tensor.role == role) {
      ++skipped;
      continue;
    }
    ASSERT_TRUE((*writer)->AddTensor(internal::ViewOf(tensor)).ok());
  }
  ASSERT_EQ(skipped, 1);
  ASSERT_TRUE(internal::CommitStaged(**staged, **writer).ok());
}

TEST(DecodeTest, TensorMissingFromTheSnapshotIsCorruptionAndChangesNothing) {
  TempStore ts;
  Rig source(Opt::kAdam);
  for (int i = 0; i < 4; ++i) source.MicroStep();  // mid-window: gradients stored
  CommitWithout(*ts.store, 4, source, internal::ParamId("l2.lora_b"), "exp_avg_sq");

  Rig target(Opt::kAdam);
  for (int i = 0; i < 5; ++i) target.MicroStep();
  const auto before = Fingerprint(target.State());
  Status status = Checkpointer(*ts.store).Restore(4, target.State());
  EXPECT_EQ(status.code(), StatusCode::kCorruption);
  EXPECT_EQ(status.message(),
            "restore step 4: tensor `l2.lora_b` role exp_avg_sq: in the manifest but not in the snapshot");
  EXPECT_EQ(FirstDifference(before, Fingerprint(target.State())), "");
}

// Four micro-steps of `source` (mid-window: gradients stored), captured as step 4.
void TrainAndCaptureStep4(Store& store, Rig& source) {
  for (int i = 0; i < 4; ++i) source.MicroStep();
  ASSERT_TRUE(Checkpointer(store).Capture(4, source.State()).ok());
}

// A damaged chunk fails the restore naming the tensor it belongs to: the
// first failing read, in the order restore wants the tensors (decode names
// a read only once the batched read has failed).
TEST(DecodeTest, DamagedChunkIsCorruptionNamingItsTensorAndChangesNothing) {
  TempStore ts;
  Rig source(Opt::kAdam);
  ASSERT_NO_FATAL_FAILURE(TrainAndCaptureStep4(*ts.store, source));
  const uint64_t id = internal::ParamId("l2.lora_a");
  Result<TensorRecord> victim = ts.store->Tensor(4, id, "exp_avg");
  ASSERT_TRUE(victim.ok()) << victim.status().ToString();
  ASSERT_FALSE(victim->chunks.empty());
  ts.Close();
  {
    testing::RawDb raw(ts.path().string());
    ASSERT_TRUE(raw.ok()) << raw.error();
    raw.FlipChunkByte(victim->chunks[0].hash, 20);  // past the chunk header
  }
  ts.Open();

  Rig target(Opt::kAdam);
  for (int i = 0; i < 5; ++i) target.MicroStep();
  const auto before = Fingerprint(target.State());
  Status status = Checkpointer(*ts.store).Restore(4, target.State());
  EXPECT_EQ(status.code(), StatusCode::kCorruption);
  EXPECT_EQ(status.message(), "restore step 4: tensor `l2.lora_a` role exp_avg: chunk 0: chunk " +
                                  victim->chunks[0].hash.Hex() + ": hash mismatch");
  EXPECT_EQ(FirstDifference(before, Fingerprint(target.State())), "");
}

TEST(DecodeTest, DecodesBitwiseAndChecksShapeAndDtype) {
  TempStore ts;
  Rig source(Opt::kSgdMomentum);
  ASSERT_NO_FATAL_FAILURE(TrainAndCaptureStep4(*ts.store, source));
  const uint64_t id = internal::ParamId("l1.lora_b");

  const std::string name = "l1.lora_b";
  const std::vector<int64_t> shape_16_4 = {16, 4}, shape_4_16 = {4, 16};
  internal::WantedTensor want;
  want.param_id = id;
  want.role = "grad";
  want.name = &name;
  want.shape = shape_16_4;
  want.dtype = DType::kFloat32;
  auto decoded = internal::DecodeTensors(*ts.store, 4, {want});
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_EQ(decoded->size(), 1u);
  const torch::Tensor* grad = decoded->Find(id, "grad");
  ASSERT_NE(grad, nullptr);
  EXPECT_TRUE(capture_test::BitwiseEqual(*grad, source.model->l1->lora_b.grad()));

  internal::WantedTensor wrong_shape = want;
  wrong_shape.shape = shape_4_16;
  auto shape = internal::DecodeTensors(*ts.store, 4, {wrong_shape});
  EXPECT_EQ(shape.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(shape.status().message(),
            "tensor `l1.lora_b` role grad: stored shape [16, 4], manifest says [4, 16]");

  internal::WantedTensor wrong_dtype = want;
  wrong_dtype.dtype = DType::kFloat64;
  auto dtype = internal::DecodeTensors(*ts.store, 4, {wrong_dtype});
  EXPECT_EQ(dtype.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(dtype.status().message(), "tensor `l1.lora_b` role grad: stored dtype float32, manifest says float64");
}

}  // namespace
}  // namespace trainsnap
