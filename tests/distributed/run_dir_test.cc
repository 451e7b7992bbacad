// The run-directory names and the global record's text format.
#include "distributed/run_dir.h"

#include <gtest/gtest.h>

namespace trainsnap::internal {
namespace {

TEST(RunDirTest, PathsNameRanksWithFiveDigits) {
  EXPECT_EQ(RankStorePath("/runs/a", 3), "/runs/a/rank-00003");
  EXPECT_EQ(RankStorePath("/runs/a", 12345), "/runs/a/rank-12345");
  EXPECT_EQ(GlobalStorePath("/runs/a"), "/runs/a/global");
}

TEST(RunDirTest, GlobalRecordRoundTripsExactly) {
  GlobalRecord record;
  record.world_size = 2;
  record.model_replicated = true;
  record.optimizer_replicated = false;
  record.ranks = {RankFigures{100, 60, 10}, RankFigures{18446744073709551615ull, 0, 7}};
  const std::string text = EncodeGlobalRecord(record);
  EXPECT_EQ(text,
            "trainsnap-global-record 1\nworld_size 2\nmodel_replicated 1\noptimizer_replicated 0\n"
            "rank 0 100 60 10\nrank 1 18446744073709551615 0 7\n");
  Result<GlobalRecord> parsed = ParseGlobalRecord(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->world_size, 2);
  EXPECT_TRUE(parsed->model_replicated);
  EXPECT_FALSE(parsed->optimizer_replicated);
  ASSERT_EQ(parsed->ranks.size(), 2u);
  EXPECT_EQ(parsed->ranks[1].logical_bytes, 18446744073709551615ull);
  EXPECT_EQ(parsed->ranks[0].stored_bytes, 60u);
  EXPECT_EQ(parsed->ranks[1].new_bytes, 7u);
}

TEST(RunDirTest, NewerRecordVersionIsNotSupported) {
  Result<GlobalRecord> parsed = ParseGlobalRecord("trainsnap-global-record 2\nworld_size 1\n");
  EXPECT_EQ(parsed.status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(parsed.status().message(), "global record version 2 (this build reads 1)");
}

TEST(RunDirTest, MalformedRecordsAreCorruptionNamingTheLine) {
  const std::string head = "trainsnap-global-record 1\n";
  struct Case {
    std::string text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", "global record is empty"},
      {"not-a-record 1\n", "global record: line 1 `not-a-record 1` is malformed"},
      {head + "world_size 1", "global record: last line not terminated"},
      {head + "world_size 0\n", "global record: line 2 `world_size 0` is malformed"},
      {head + "world_size 1\nworld_size 1\n", "global record: line 3 `world_size 1` is malformed"},
      {head + "world_size 1\nmodel_replicated 2\n", "global record: line 3 `model_replicated 2` is malformed"},
      {head + "world_size 1\nmodel_replicated 1\noptimizer_replicated 1\nrank 1 0 0 0\n",
       "global record: line 5 `rank 1 0 0 0` is malformed"},
      {head + "world_size 1\nmodel_replicated 1\noptimizer_replicated 1\nrank 0 0 0 18446744073709551616\n",
       "global record: line 5 `rank 0 0 0 18446744073709551616` is malformed"},
      {head + "world_size 1\nmodel_replicated 1\n",
       "global record lacks world_size, model_replicated or optimizer_replicated"},
      {head + "world_size 2\nmodel_replicated 1\noptimizer_replicated 1\nrank 0 1 1 1\n",
       "global record: 1 rank lines for world size 2"},
  };
  for (const Case& c : cases) {
    Result<GlobalRecord> parsed = ParseGlobalRecord(c.text);
    EXPECT_EQ(parsed.status().code(), StatusCode::kCorruption) << c.text;
    EXPECT_EQ(parsed.status().message(), c.message) << c.text;
  }
}

}  // namespace
}  // namespace trainsnap::internal
