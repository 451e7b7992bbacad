#include <sstream>

#include <gtest/gtest.h>

#include "cli_fixture.h"

namespace trainsnap::cli_test {
namespace {

class ListCommandTest : public CliTest {
 protected:
  // Three snapshots of a 16 KiB float tensor (4 chunks) and an int tensor;
  // step 2 changes one chunk, step 3 everything. Left open as a writer.
  void SetUp() override {
    store_ = OpenStore();
    ASSERT_NE(store_, nullptr);
    std::vector<float> a = RandomFloats(4096, 1);
    std::vector<uint8_t> b = RandomBytes(DType::kInt32, 100, 9);
    for (int64_t step : {1, 2, 3}) {
      if (step == 2) a[10] = 42.0f;
      if (step == 3) a = RandomFloats(4096, 3);
      auto info = WriteSnapshot(*store_, step,
                                {{0xA, "param", DType::kFloat32, {64, 64}, FloatBytes(a)},
                                 {0xB, "param", DType::kInt32, {100}, b}});
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      infos_.push_back(*info);
    }
  }
  std::unique_ptr<Store> store_;
  std::vector<SnapshotInfo> infos_;
};

TEST_F(ListCommandTest, JsonHasEverySnapshotAndTotalsWhileAWriterHoldsTheStore) {
  CliRun run = RunCli({"list", StorePath(), "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(run.err.empty()) << run.err;  // no progress output when piped
  nlohmann::json doc = run.Json();
  EXPECT_EQ(doc["schema"], "trainsnap.list/1");
  EXPECT_EQ(doc["store"], StorePath());
  ASSERT_EQ(doc["snapshots"].size(), 3u);
  uint64_t logical = 0, stored = 0, fresh = 0;
  for (size_t i = 0; i < 3; ++i) {
    const auto& s = doc["snapshots"][i];
    const SnapshotInfo& info = infos_[i];
    EXPECT_EQ(s["step"], info.step);
    EXPECT_EQ(s["created_unix_ms"], info.created_unix_ms);
    EXPECT_EQ(s["tensors"], 2);
    EXPECT_EQ(s["logical_bytes"], 4096 * 4 + 400);
    EXPECT_EQ(s["stored_bytes"], info.stored_bytes);
    EXPECT_EQ(s["new_bytes"], info.new_bytes);
    EXPECT_EQ(s["new_chunks"], info.new_chunks);
    EXPECT_EQ(s["chunks"], 5);
    EXPECT_DOUBLE_EQ(s["compression_ratio"].get<double>(),
                     static_cast<double>(info.logical_bytes) / info.stored_bytes);
    EXPECT_DOUBLE_EQ(s["dedup_ratio"].get<double>(), static_cast<double>(info.stored_bytes) / info.new_bytes);
    logical += info.logical_bytes;
    stored += info.stored_bytes;
    fresh += info.new_bytes;
  }
  EXPECT_EQ(doc["snapshots"][1]["new_chunks"], 1);  // only the changed chunk
  EXPECT_EQ(doc["snapshots"][2]["new_chunks"], 4);
  EXPECT_EQ(doc["totals"]["snapshots"], 3);
  EXPECT_EQ(doc["totals"]["logical_bytes"], logical);
  EXPECT_EQ(doc["totals"]["stored_bytes"], stored);
  EXPECT_EQ(doc["totals"]["new_bytes"], fresh);
}

TEST_F(ListCommandTest, HumanOutputIsAnAlignedTable) {
  CliRun run = RunCli({"list", StorePath()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::vector<std::string> lines;
  std::istringstream in(run.out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 7u) << run.out;  // header, rule, 3 rows, rule, totals
  EXPECT_EQ(lines[0].substr(0, 5), " STEP") << lines[0];  // right-aligned under "total"
  for (const char* column : {"CREATED (UTC)", "TENSORS", "LOGICAL", "STORED", "NEW", "DEDUP", "COMPRESSION"}) {
    EXPECT_NE(lines[0].find(column), std::string::npos) << column;
  }
  // Right-aligned numeric columns end at the same position on every row.
  size_t logical_end = lines[0].find("LOGICAL") + std::string("LOGICAL").size();
  for (size_t row : {2u, 3u, 4u}) {
    EXPECT_EQ(lines[row].substr(logical_end - 8, 8), "16.4 KiB") << lines[row];  // 16784 bytes
  }
  EXPECT_EQ(lines[6].rfind("total", 0), 0u) << lines[6];
  EXPECT_NE(lines[6].find("3 snapshots"), std::string::npos);
  EXPECT_NE(lines[6].find("49.2 KiB"), std::string::npos) << lines[6];  // 3 * 16784 bytes
}

TEST_F(ListCommandTest, EmptyStore) {
  store_.reset();
  TempDir other;
  {
    auto empty = Store::Open(other.path() + "/s", TestStoreOptions());
    ASSERT_TRUE(empty.ok());
  }
  CliRun run = RunCli({"list", other.path() + "/s", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.Json()["snapshots"].size(), 0u);
  EXPECT_EQ(run.Json()["totals"]["logical_bytes"], 0);
  EXPECT_TRUE(run.Json()["totals"]["dedup_ratio"].is_null());
}

}  // namespace
}  // namespace trainsnap::cli_test
