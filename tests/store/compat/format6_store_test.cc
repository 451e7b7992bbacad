// A store written by a build of format version 6 (chunk codec 1 only, see
// format6_fixture.h) opens, reads bit-exactly, verifies, and is upgraded to
// the current version by a writable open, after which new snapshots (plane
// coded) and old ones read side by side.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "store/compat/format6_fixture.h"
#include "testing/temp_dir.h"
#include "trainsnap/store.h"

namespace trainsnap::testing {
namespace {

// Unpacks the archive into dir/store; the path of the store.
std::string Unpack(const TempDir& dir) {
  const std::string store = dir.Sub("store");
  const std::string command = "mkdir -p '" + store + "' && tar -xzf '" TRAINSNAP_FORMAT6_ARCHIVE "' -C '" + store + "'";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return store;
}

void ExpectSnapshotsRestoreBitExactly(Store& store, int64_t last_step) {
  auto listed = store.List();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), static_cast<size_t>(last_step + 1));
  for (int64_t step = 0; step <= last_step; ++step) {
    for (const format6::FixtureTensor& expected : format6::Tensors(step)) {
      auto record = store.Tensor(step, expected.param_id, "param");
      ASSERT_TRUE(record.ok()) << "step " << step << ": " << record.status().ToString();
      ASSERT_EQ(record->dtype, expected.dtype);
      std::vector<uint8_t> got(record->bytes);
      Status s = store.ReadTensor(*record, got.data(), got.size());
      ASSERT_TRUE(s.ok()) << "step " << step << " param " << expected.param_id << ": " << s.ToString();
      EXPECT_EQ(got, expected.bytes) << "step " << step << " param " << expected.param_id;
    }
  }
}

TEST(Format6StoreTest, ReadOnlyOpenRestoresEverySnapshotBitExactlyAndVerifies) {
  TempDir dir;
  const std::string path = Unpack(dir);
  auto store = Store::OpenReadOnly(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ExpectSnapshotsRestoreBitExactly(**store, format6::kSteps - 1);
  auto manifest = (*store)->Manifest(format6::kSteps - 1);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  EXPECT_EQ(*manifest, "format6 step 3");
  auto report = (*store)->Verify();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->problems.empty());
  EXPECT_TRUE((*store)->open_notes().empty());
}

TEST(Format6StoreTest, WritableOpenUpgradesThenOldAndNewSnapshotsReadTogether) {
  TempDir dir;
  const std::string path = Unpack(dir);
  {
    auto store = Store::Open(path, format6::WrittenWith());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    const std::vector<std::string> notes = (*store)->open_notes();
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_EQ(notes[0],
              "upgraded the store from format version 6 to 7 (plane-coded chunks); builds that read only version 6 "
              "no longer open it");
    // Two more snapshots: deltas (plane coded) against the old keyframe's
    // chain, then whatever the store's keyframe policy makes of step 5.
    for (int64_t step = format6::kSteps; step < format6::kSteps + 2; ++step) {
      auto writer = (*store)->BeginSnapshot(step, {});
      ASSERT_TRUE(writer.ok()) << writer.status().ToString();
      for (const auto& t : format6::Tensors(step)) ASSERT_TRUE((*writer)->AddTensor(format6::ViewOf(t)).ok());
      (*writer)->SetManifest("step " + std::to_string(step));
      auto info = (*writer)->Commit();
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      EXPECT_GT(info->new_bytes, 0u);
    }
    ExpectSnapshotsRestoreBitExactly(**store, format6::kSteps + 1);
  }
  auto again = Store::Open(path, format6::WrittenWith());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE((*again)->open_notes().empty());  // upgraded once
  ExpectSnapshotsRestoreBitExactly(**again, format6::kSteps + 1);
  auto report = (*again)->Verify();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->problems.empty());
}

}  // namespace
}  // namespace trainsnap::testing
