// `trainsnap list` on a run directory: global steps with every rank's bytes,
// read from the global records (docs/distributed.md, docs/cli.md).
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "distributed/run_dir.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int exit_code = -1;
  std::string out;
};

CliResult RunCli(const std::string& args) {
  CliResult result;
  FILE* pipe = popen((std::string(TRAINSNAP_CLI_PATH) + " " + args + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

class RunDirListTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "trainsnap_rundir_XXXXXX").string();
    run_ = mkdtemp(pattern.data());
    StoreOptions options;
    options.reserve_bytes = 0;
    options.sync = false;
    // Empty rank stores: list reads only the global records.
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(Store::Open(RankStorePath(run_, r), options).ok());
    auto global = Store::Open(GlobalStorePath(run_), options);
    ASSERT_TRUE(global.ok()) << global.status().ToString();
    for (int64_t step : {3, 5}) {
      GlobalRecord record;
      record.world_size = 2;
      record.optimizer_replicated = step != 5;
      record.ranks = {RankFigures{uint64_t(1000 * step), uint64_t(600 * step), uint64_t(100 * step)},
                      RankFigures{uint64_t(1000 * step), uint64_t(700 * step), uint64_t(200 * step)}};
      auto writer = (*global)->BeginSnapshot(step);
      ASSERT_TRUE(writer.ok());
      (*writer)->SetManifest(EncodeGlobalRecord(record));
      ASSERT_TRUE((*writer)->Commit().ok());
    }
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(run_, ec);
  }
  std::string run_;
};

TEST_F(RunDirListTest, JsonListsGlobalStepsWithEveryRanksBytes) {
  CliResult result = RunCli("list " + run_ + " --json");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  nlohmann::json doc = nlohmann::json::parse(result.out);
  EXPECT_EQ(doc["schema"], "trainsnap.list-run/1");
  EXPECT_EQ(doc["run_dir"], run_);
  ASSERT_EQ(doc["global_steps"].size(), 2u);
  const nlohmann::json& five = doc["global_steps"][1];
  EXPECT_EQ(five["step"], 5);
  EXPECT_EQ(five["world_size"], 2);
  EXPECT_EQ(five["model_replicated"], true);
  EXPECT_EQ(five["optimizer_replicated"], false);
  EXPECT_EQ(five["logical_bytes"], 10000);
  EXPECT_EQ(five["stored_bytes"], 6500);
  EXPECT_EQ(five["new_bytes"], 1500);
  ASSERT_EQ(five["ranks"].size(), 2u);
  EXPECT_EQ(five["ranks"][1]["rank"], 1);
  EXPECT_EQ(five["ranks"][1]["stored_bytes"], 3500);
  EXPECT_EQ(five["ranks"][1]["new_bytes"], 1000);
  EXPECT_EQ(doc["global_steps"][0]["step"], 3);
  EXPECT_EQ(doc["global_steps"][0]["optimizer_replicated"], true);
}

TEST_F(RunDirListTest, HumanOutputHasOneRowPerGlobalStep) {
  CliResult result = RunCli("list " + run_);
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_EQ(result.out.rfind("STEP  CREATED (UTC)        RANKS   LOGICAL    STORED       NEW  STORED PER RANK\n", 0), 0u)
      << result.out;
  size_t lines = 0;
  for (char c : result.out) lines += c == '\n';
  EXPECT_EQ(lines, 4u) << result.out;  // header, rule, two steps
  // Step 5: 2 x 5000 B logical, 3000 + 3500 B stored, 500 + 1000 B new.
  EXPECT_NE(result.out.find("      2  9.77 KiB  6.35 KiB  1.46 KiB  2.93 KiB / 3.42 KiB\n"), std::string::npos)
      << result.out;
}

TEST_F(RunDirListTest, DamagedGlobalRecordIsCorruptionExitCode3) {
  {
    StoreOptions options;
    options.reserve_bytes = 0;
    auto global = Store::Open(GlobalStorePath(run_), options);
    ASSERT_TRUE(global.ok());
    auto writer = (*global)->BeginSnapshot(7);
    ASSERT_TRUE(writer.ok());
    (*writer)->SetManifest("trainsnap-global-record 1\nworld_size x\n");
    ASSERT_TRUE((*writer)->Commit().ok());
  }
  CliResult result = RunCli("list " + run_);
  EXPECT_EQ(result.exit_code, 3) << result.out;
  EXPECT_NE(result.out.find("global step 7: global record: line 2 `world_size x` is malformed"), std::string::npos)
      << result.out;
}

}  // namespace
}  // namespace trainsnap::internal
