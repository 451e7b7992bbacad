#include "store/commit_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testing/temp_dir.h"

namespace trainsnap::internal {
namespace {

using trainsnap::testing::TempDir;
namespace fs = std::filesystem;

void FlipByte(const std::string& file, std::streamoff offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(offset);
  f.write(&c, 1);
}

TEST(CommitLogTest, AbsentFileReadsAsNone) {
  TempDir dir;
  auto state = CommitLog::Read(dir.path());
  ASSERT_TRUE(state.ok());
  EXPECT_FALSE(state->has_value());
}

TEST(CommitLogTest, WritesRoundTripWithTheLoss) {
  TempDir dir;
  CommitLogState first{3, 7, std::nullopt};
  auto log = CommitLog::Open(dir.path(), /*sync=*/true, first);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  auto read = CommitLog::Read(dir.path());
  ASSERT_TRUE(read.ok() && read->has_value());
  EXPECT_EQ((*read)->transactions, 3u);
  EXPECT_EQ((*read)->newest_step, std::optional<int64_t>(7));
  EXPECT_FALSE((*read)->loss.has_value());

  LostCommits loss;
  loss.recorded = 9;
  loss.found = 6;
  loss.newest_recorded = -4;
  CommitLogState second{4, std::nullopt, loss};
  ASSERT_TRUE((*log)->Write(second).ok());
  read = CommitLog::Read(dir.path());
  ASSERT_TRUE(read.ok() && read->has_value());
  EXPECT_EQ((*read)->transactions, 4u);
  EXPECT_FALSE((*read)->newest_step.has_value());
  ASSERT_TRUE((*read)->loss.has_value());
  EXPECT_EQ((*read)->loss->recorded, 9u);
  EXPECT_EQ((*read)->loss->found, 6u);
  EXPECT_EQ((*read)->loss->newest_recorded, std::optional<int64_t>(-4));
  EXPECT_FALSE((*read)->loss->newest_found.has_value());
}

// A torn write damages only the slot being written: the previous state reads.
TEST(CommitLogTest, ADamagedSlotFallsBackToTheOtherAndBothDamagedIsCorruption) {
  TempDir dir;
  auto log = CommitLog::Open(dir.path(), /*sync=*/false, CommitLogState{1, 1, std::nullopt});
  ASSERT_TRUE(log.ok());
  ASSERT_TRUE((*log)->Write(CommitLogState{2, 2, std::nullopt}).ok());
  ASSERT_TRUE((*log)->Write(CommitLogState{3, 3, std::nullopt}).ok());
  const std::string file = dir.path() + "/" + CommitLog::kFileName;
  EXPECT_EQ(fs::file_size(file), 4096u + 72u);
  // Sequences 1..4 were written (two at creation): 4 is in slot 0.
  FlipByte(file, 20);
  auto read = CommitLog::Read(dir.path());
  ASSERT_TRUE(read.ok() && read->has_value()) << read.status().ToString();
  EXPECT_EQ((*read)->transactions, 2u);
  FlipByte(file, 4096 + 20);
  read = CommitLog::Read(dir.path());
  EXPECT_EQ(read.status().code(), StatusCode::kCorruption);
  EXPECT_NE(read.status().message().find("neither slot is intact"), std::string::npos);
  // Reopening continues after the newest intact slot.
  fs::remove(file);
  log = CommitLog::Open(dir.path(), /*sync=*/false, CommitLogState{5, 5, std::nullopt});
  ASSERT_TRUE(log.ok());
  read = CommitLog::Read(dir.path());
  ASSERT_TRUE(read.ok() && read->has_value());
  EXPECT_EQ((*read)->transactions, 5u);
}

}  // namespace
}  // namespace trainsnap::internal
