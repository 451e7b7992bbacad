#include <gtest/gtest.h>

#include "cli_fixture.h"

namespace trainsnap::cli_test {
namespace {

class StatsCommandTest : public CliTest {};

TEST_F(StatsCommandTest, JsonMatchesTheLibraryAndCountsCollectableBytes) {
  uint64_t new_2 = 0;
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    std::vector<uint8_t> shared = FloatBytes(RandomFloats(1024, 7));
    ASSERT_TRUE(WriteSnapshot(*store, 1, {{1, "param", DType::kFloat32, {1024}, shared}}).ok());
    auto two = WriteSnapshot(*store, 2, {{1, "param", DType::kFloat32, {1024}, shared},
                                         {2, "param", DType::kFloat32, {1024}, FloatBytes(RandomFloats(1024, 8))}});
    ASSERT_TRUE(two.ok());
    new_2 = two->new_bytes;
    ASSERT_TRUE(store->Delete(2).ok());  // its own chunk becomes collectable
  }
  CliRun run = RunCli({"stats", StorePath(), "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json doc = run.Json();
  auto store = Store::OpenReadOnly(StorePath());
  ASSERT_TRUE(store.ok());
  auto stats = (*store)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(doc["schema"], "trainsnap.stats/1");
  EXPECT_EQ(doc["snapshots"], 1);
  EXPECT_EQ(doc["chunks"], 2);
  EXPECT_EQ(doc["chunk_bytes"], 4096);
  EXPECT_EQ(doc["chunk_raw_bytes"], 8192);
  EXPECT_EQ(doc["collectable_chunks"], 1);
  EXPECT_EQ(doc["collectable_bytes"], new_2);
  EXPECT_EQ(doc["chunk_stored_bytes"], stats->chunk_stored_bytes);
  EXPECT_EQ(doc["logical_bytes"], 4096);
  EXPECT_EQ(doc["sst_bytes"], stats->sst_bytes);
  EXPECT_EQ(doc["pack_bytes"], stats->pack_bytes);
  EXPECT_EQ(doc["packs"], 1);
  EXPECT_EQ(doc["disk_bytes"], stats->disk_bytes);
  EXPECT_EQ(stats->disk_bytes, stats->sst_bytes + stats->pack_bytes + stats->wal_bytes + stats->reserve_bytes +
                                   stats->other_bytes);
  EXPECT_EQ(doc["reserve_bytes"], stats->reserve_bytes);
  EXPECT_EQ(doc["pack_garbage_bytes"], stats->pack_garbage_bytes);
  EXPECT_DOUBLE_EQ(doc["compression_ratio"].get<double>(), 8192.0 / stats->chunk_stored_bytes);

  CliRun human = RunCli({"stats", StorePath()});
  ASSERT_EQ(human.exit_code, 0) << human.err;
  for (const char* expected : {"collectable chunks", "pack files (1)", "dedup ratio", "8.00 KiB"}) {
    EXPECT_NE(human.out.find(expected), std::string::npos) << "missing `" << expected << "` in\n" << human.out;
  }
}

}  // namespace
}  // namespace trainsnap::cli_test
