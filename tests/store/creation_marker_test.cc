// The creation marker (src/store/creation_marker.h) and what Store::Open and
// Store::OpenReadOnly make of a directory holding one. Kills at every step
// of a real creation: tests/crash/crash_test.cc.
#include "store/creation_marker.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "store/commit_log.h"
#include "store/store_files.h"
#include "store/store_test_util.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace trainsnap::testing {
namespace {

namespace fs = std::filesystem;
using internal::CreationMarker;
using internal::CreationState;
using internal::InspectCreation;
using internal::kCreationMarker;
using internal::kReserveFile;
using internal::kReserveTempFile;

void Touch(const fs::path& path) { std::ofstream(path) << "x"; }

std::set<std::string> Names(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

TEST(CreationMarkerTest, HeldRunningThenInterruptedThenFinished) {
  TempDir dir;
  auto none = InspectCreation(dir.path());
  ASSERT_OK(none);
  EXPECT_EQ(*none, CreationState::kNone);
  {
    auto marker = CreationMarker::Acquire(dir.path());
    ASSERT_OK(marker);
    EXPECT_TRUE(fs::exists(dir.Sub(kCreationMarker)));
    auto running = InspectCreation(dir.path());
    ASSERT_OK(running);
    EXPECT_EQ(*running, CreationState::kRunning);
    // A second creator (another open file description: flock conflicts
    // also within one process) is told to wait.
    EXPECT_STATUS(CreationMarker::Acquire(dir.path()), StatusCode::kBusy, "is being created by another process");
  }
  // Released without Finish: a crash's leftover.
  auto interrupted = InspectCreation(dir.path());
  ASSERT_OK(interrupted);
  EXPECT_EQ(*interrupted, CreationState::kInterrupted);
  auto again = CreationMarker::Acquire(dir.path());
  ASSERT_OK(again);
  ASSERT_OK((*again)->Finish());
  EXPECT_FALSE(fs::exists(dir.Sub(kCreationMarker)));
  auto finished = InspectCreation(dir.path());
  ASSERT_OK(finished);
  EXPECT_EQ(*finished, CreationState::kNone);
}

TEST(CreationMarkerTest, ClearLeftoversRemovesWhatACreationWritesAndNothingElse) {
  TempDir dir;
  auto marker = CreationMarker::Acquire(dir.path());
  ASSERT_OK(marker);
  for (const char* name :
       {"CURRENT", "IDENTITY", "LOCK", "LOG", "LOG.old.1700000000", "MANIFEST-000005", "OPTIONS-000007", "000004.log",
        "000009.sst", "000010.blob", "000001.dbtmp", internal::CommitLog::kFileName, "SPACE_RESERVE",
        "SPACE_RESERVE.tmp"}) {
    Touch(dir.Sub(name));
  }
  fs::create_directory(dir.Sub("packs"));
  Touch(dir.Sub("packs/pack-00000001.pack"));
  Touch(dir.Sub("packs/pack-0000000a.pack"));
  size_t removed = 0;
  ASSERT_OK((*marker)->ClearLeftovers(&removed));
  EXPECT_EQ(removed, 14u + 2u + 1u);  // the files, the two packs, packs/ itself
  EXPECT_EQ(Names(dir.path()), std::set<std::string>({kCreationMarker}));

  // A name no creation writes: somebody's data. Nothing is removed.
  Touch(dir.Sub("CURRENT"));
  Touch(dir.Sub("notes.txt"));
  fs::create_directory(dir.Sub("packs"));
  Touch(dir.Sub("packs/pack-00000001.pack"));
  EXPECT_STATUS((*marker)->ClearLeftovers(&removed), StatusCode::kNotSupported,
                "also holds `notes.txt`, which no creation writes: nothing was removed");
  EXPECT_EQ(Names(dir.path()), std::set<std::string>({kCreationMarker, "CURRENT", "notes.txt", "packs"}));
  EXPECT_TRUE(fs::exists(dir.Sub("packs/pack-00000001.pack")));
  fs::remove(dir.Sub("notes.txt"));
  Touch(dir.Sub("packs/mine.bin"));
  EXPECT_STATUS((*marker)->ClearLeftovers(&removed), StatusCode::kNotSupported, "`packs/mine.bin`");
  EXPECT_TRUE(fs::exists(dir.Sub("CURRENT")));
}

// A half-created store (what a kill in Store::Open left): read-only opens
// say so (NotFound, not a RocksDB detail), an open without create_if_missing
// too; an open with it creates the store again and says so.
TEST(StoreCreationTest, AnInterruptedCreationIsFinishedByTheNextWritableOpen) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  fs::create_directory(path);
  {
    auto marker = CreationMarker::Acquire(path);
    ASSERT_OK(marker);
    // What a creation killed after RocksDB made only its default column
    // family leaves (the case that used to be "not a trainsnap store").
    Touch(path + "/CURRENT");
    Touch(path + "/MANIFEST-000001");
    Touch(path + "/OPTIONS-000003");
    Touch(path + "/LOCK");
    Touch(path + "/IDENTITY");
  }
  EXPECT_STATUS(Store::OpenReadOnly(path), StatusCode::kNotFound, "store creation was interrupted");
  StoreOptions no_create = SmallChunks();
  no_create.create_if_missing = false;
  EXPECT_STATUS(Store::Open(path, no_create), StatusCode::kNotFound,
                "(create_if_missing is false): store creation was interrupted");
  EXPECT_TRUE(fs::exists(path + "/MANIFEST-000001"));  // refused opens change nothing

  auto store = Store::Open(path, SmallChunks());
  ASSERT_OK(store);
  ASSERT_EQ((*store)->open_notes().size(), 1u);
  EXPECT_NE((*store)->open_notes()[0].find("store creation had been interrupted"), std::string::npos)
      << (*store)->open_notes()[0];
  EXPECT_FALSE(fs::exists(path + "/" + kCreationMarker));
  auto a = NormalFloats(3000, 1);
  ASSERT_OK(WriteSnapshot(**store, 1, {{1, &a}}));
  EXPECT_EQ(ReadFloats(**store, 1, 1), a);
  store->reset();
  auto reopened = Store::Open(path, SmallChunks());
  ASSERT_OK(reopened);
  EXPECT_TRUE((*reopened)->open_notes().empty());
  EXPECT_EQ(ReadFloats(**reopened, 1, 1), a);
}

// A kill while the reserve was written leaves SPACE_RESERVE.tmp in a whole
// store: the next writable open removes it, also when it writes no reserve
// (none configured, or no room for one).
TEST(StoreCreationTest, ALeftoverReserveTempFileIsRemovedByTheNextWritableOpen) {
  for (uint64_t reserve : {uint64_t{0}, uint64_t{1} << 50}) {
    SCOPED_TRACE("reserve_bytes " + std::to_string(reserve));
    TempDir dir;
    const std::string path = dir.Sub("s");
    StoreOptions options = SmallChunks();
    options.reserve_bytes = 0;
    ASSERT_OK(Store::Open(path, options));
    Touch(path + "/" + kReserveTempFile);
    options.reserve_bytes = reserve;
    auto store = Store::Open(path, options);
    ASSERT_OK(store);
    EXPECT_FALSE(fs::exists(path + "/" + kReserveTempFile));
    EXPECT_FALSE(fs::exists(path + "/" + kReserveFile));
  }
}

// While another process creates the store (it holds the marker's lock),
// every open is Busy and changes nothing.
TEST(StoreCreationTest, OpensWaitForACreationInProgress) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  fs::create_directory(path);
  auto marker = CreationMarker::Acquire(path);
  ASSERT_OK(marker);
  Touch(path + "/LOCK");
  EXPECT_STATUS(Store::Open(path, SmallChunks()), StatusCode::kBusy, "is being created by another process");
  EXPECT_STATUS(Store::OpenReadOnly(path), StatusCode::kBusy, "being created by another process");
  EXPECT_EQ(Names(path), std::set<std::string>({kCreationMarker, "LOCK"}));
}

// A fresh creation leaves no marker and no note.
TEST(StoreCreationTest, AFreshStoreHasNoMarkerAndNoNote) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  auto store = Store::Open(path, SmallChunks());
  ASSERT_OK(store);
  EXPECT_TRUE((*store)->open_notes().empty());
  EXPECT_FALSE(fs::exists(path + "/" + kCreationMarker));
}

}  // namespace
}  // namespace trainsnap::testing
