// Encode and commit of a staged snapshot: every staged tensor goes into the
// writer byte for byte, and the writer's errors name the tensor once, by the
// name staging gave it.
#include "capture/encode.h"

#include <cstring>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/training_rig.h"
#include "torch/manifest_codec.h"

namespace trainsnap::internal {
namespace {

using capture_test::Opt;
using capture_test::Rig;
using capture_test::TempStore;

std::unique_ptr<StagedSnapshot> StageRig(Rig& rig, int64_t step) {
  BaseIdentityBuilder base;
  Result<std::unique_ptr<StagedSnapshot>> staged = Stage(step, rig.State(), CheckpointerOptions(), base);
  EXPECT_TRUE(staged.ok()) << staged.status().ToString();
  return staged.ok() ? std::move(staged).value() : nullptr;
}

TEST(EncodeTest, EveryStagedTensorIsStoredByteForByteWithTheManifest) {
  TempStore ts;
  Rig rig(Opt::kAdam);
  for (int i = 0; i < 4; ++i) rig.MicroStep();  // optimizer state and a pending gradient
  std::unique_ptr<StagedSnapshot> staged = StageRig(rig, 4);
  ASSERT_NE(staged, nullptr);
  auto writer = ts.store->BeginSnapshot(4);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  ASSERT_TRUE(EncodeTensors(*staged, **writer).ok());
  const proto::TrainingManifest staged_manifest = staged->manifest;  // CommitStaged consumes it
  Result<SnapshotInfo> info = CommitStaged(*staged, **writer);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->step, 4);
  EXPECT_EQ(info->tensors, staged->staging.tensors().size());

  // Stored split (manifest format version 2), read back whole.
  Result<proto::TrainingManifest> manifest = ReadManifest(*ts.store, 4);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*manifest, staged_manifest));
  for (const StagedTensor& tensor : staged->staging.tensors()) {
    Result<TensorRecord> record = ts.store->Tensor(4, tensor.param_id, tensor.role);
    const std::string name = tensor.name ? *tensor.name : "(unnamed)";
    ASSERT_TRUE(record.ok()) << name << " " << tensor.role;
    std::vector<uint8_t> bytes(record->bytes);
    ASSERT_TRUE(ts.store->ReadTensor(*record, bytes.data(), bytes.size()).ok());
    ASSERT_EQ(bytes.size(), tensor.host.nbytes()) << name;
    EXPECT_EQ(std::memcmp(bytes.data(), tensor.host.data_ptr(), bytes.size()), 0) << name << " " << tensor.role;
  }
}

// Two captures of the same training state at different steps store the
// same layout bytes (one shared manifest) and differ only in their own part.
TEST(EncodeTest, TwoCapturesOfOneLayoutShareItsBytes) {
  TempStore ts;
  Rig rig(Opt::kAdam);
  std::vector<std::string> layouts, owns;
  for (int64_t step : {1, 2}) {
    rig.MicroStep();
    std::unique_ptr<StagedSnapshot> staged = StageRig(rig, step);
    ASSERT_NE(staged, nullptr);
    auto writer = ts.store->BeginSnapshot(step);
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    ASSERT_TRUE(EncodeTensors(*staged, **writer).ok());
    Result<SnapshotInfo> info = CommitStaged(*staged, **writer);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    layouts.push_back(ts.store->SharedManifest(step).value());
    owns.push_back(ts.store->Manifest(step).value());
  }
  EXPECT_FALSE(layouts[0].empty());
  EXPECT_EQ(layouts[0], layouts[1]);
  EXPECT_NE(owns[0], owns[1]);
  proto::TrainingManifest layout;
  ASSERT_TRUE(layout.ParseFromString(layouts[0]));
  EXPECT_EQ(layout.step(), 0);  // per-snapshot fields live in the own part
  EXPECT_EQ(layout.rng_size(), 0);
  proto::SnapshotManifest own;
  ASSERT_TRUE(own.ParseFromString(owns[1]));
  EXPECT_EQ(own.step(), 2);
  EXPECT_EQ(own.format_version(), 2u);
}

TEST(EncodeTest, AWriterErrorNamesTheTensorOnceByItsStagedName) {
  TempStore ts;
  Rig rig(Opt::kSgdMomentum);
  std::unique_ptr<StagedSnapshot> staged = StageRig(rig, 1);
  ASSERT_NE(staged, nullptr);
  const StagedTensor& first = staged->staging.tensors().front();
  ASSERT_NE(first.name, nullptr);
  ASSERT_EQ(*first.name, "l1.lora_a");
  auto writer = ts.store->BeginSnapshot(1);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(EncodeTensors(*staged, **writer).ok());
  ASSERT_TRUE(CommitStaged(*staged, **writer).ok());
  // Encoding into a committed writer fails at the first tensor.
  Status again = EncodeTensors(*staged, **writer);
  EXPECT_EQ(again, Status::InvalidArgument("tensor `l1.lora_a` role param: the snapshot is already committed"));
}

// Staging does not look for a (param_id, role) pair staged twice (a table
// probed per tensor on the training thread); the writer refuses the second
// when the capture is encoded, naming it, and nothing is committed.
TEST(EncodeTest, APairStagedTwiceIsRefusedWhenEncodedAndNothingIsCommitted) {
  TempStore ts;
  StagedSnapshot staged;
  staged.step = 1;
  auto name = std::make_shared<const std::string>("w");
  ASSERT_TRUE(staged.staging.Add(7, "param", torch::ones({4}), name).ok());
  ASSERT_TRUE(staged.staging.Add(7, "param", torch::zeros({4}), name).ok());
  auto writer = ts.store->BeginSnapshot(1);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  Status encoded = EncodeTensors(staged, **writer);
  EXPECT_EQ(encoded, Status::InvalidArgument("tensor `w` role param: added twice"));
  writer->reset();  // abandoned, as the pipeline does after a failure
  EXPECT_TRUE(ts.store->List().value().empty());
}

TEST(EncodeTest, ATensorStagedWithoutANameIsNamedByItsIdAndRole) {
  StagedTensor staged;
  staged.param_id = 0x2a;
  staged.role = "param";
  staged.dtype = DType::kFloat32;
  staged.host = torch::zeros({3});
  EXPECT_EQ(ViewOf(staged).name, "");  // the writer then says "tensor param_id 0x... role param"
  staged.name = std::make_shared<const std::string>("");
  EXPECT_EQ(ViewOf(staged).name, "");  // an empty name is no name
  staged.name = std::make_shared<const std::string>("w");
  TensorView view = ViewOf(staged);
  EXPECT_EQ(view.name, "tensor `w` role param");
  EXPECT_EQ(view.size_bytes, 12u);
  EXPECT_EQ(view.shape, std::vector<int64_t>{3});
  EXPECT_EQ(view.data, staged.host.data_ptr());
}

}  // namespace
}  // namespace trainsnap::internal
