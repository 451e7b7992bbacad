// The CLI on a run directory (docs/distributed.md, docs/cli.md): `list`
// (global steps with every rank's bytes, from the global records), `verify`,
// and the crash-safe `rollback`/`delete`/`prune`/`gc`.
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <vector>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "distributed/run_dir.h"
#include "testing/temp_dir.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int exit_code = -1;
  std::string out;
};

// `env`: NAME=VALUE set for the tool only. exec: a signal that kills the
// tool is seen here as such (exit_code -SIGNAL), not as the shell's 128+N.
CliResult RunCli(const std::string& args, const std::string& env = "") {
  CliResult result;
  FILE* pipe = popen(("exec env " + env + " " + std::string(TRAINSNAP_CLI_PATH) + " " + args + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? -WTERMSIG(status) : -1000;
  return result;
}

class RunDirListTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.emplace();
    run_ = dir_->path();
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
  void TearDown() override { dir_.reset(); }
  std::optional<testing::TempDir> dir_;  // a fresh one per SetUp
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

namespace trainsnap::internal {
namespace {

StoreOptions RunStoreOptions() {
  StoreOptions options;
  options.reserve_bytes = 0;
  options.sync = false;
  return options;
}

// Rank `r`'s snapshot of `step`: one small tensor, some bytes shared with
// its other steps.
void WriteRankSnapshot(Store& rank, int r, int64_t step) {
  std::vector<float> values(4096);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(r * 100000 + step * (i % 7 == 0) + i);
  TensorView view;
  view.param_id = 42;
  view.role = "param";
  view.dtype = DType::kFloat32;
  view.shape = {4096};
  view.data = values.data();
  view.size_bytes = values.size() * sizeof(float);
  auto writer = rank.BeginSnapshot(step);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->AddTensor(view).ok());
  (*writer)->SetManifest("rank " + std::to_string(r));
  ASSERT_TRUE((*writer)->Commit().ok());
}

void WriteGlobalRecord(Store& global, int64_t step, int world) {
  GlobalRecord record;
  record.world_size = world;
  record.ranks.resize(static_cast<size_t>(world));
  auto writer = global.BeginSnapshot(step);
  ASSERT_TRUE(writer.ok());
  (*writer)->SetManifest(EncodeGlobalRecord(record));
  ASSERT_TRUE((*writer)->Commit().ok());
}

std::vector<int64_t> StepsAt(const std::string& path) {
  auto store = Store::OpenReadOnly(path);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return {};
  auto list = (*store)->List();
  std::vector<int64_t> steps;
  if (list.ok()) {
    for (const SnapshotInfo& info : *list) steps.push_back(info.step);
  }
  return steps;
}

// A synthetic run of 3 ranks (store API only): global steps 1-5, every rank
// holding each of them (one small tensor per rank and step, some bytes
// shared between steps), and rank 2 also holding step 6, which never became
// global.
class RunDirMutationTest : public ::testing::Test {
 protected:
  static constexpr int kRanks = 3;

  void SetUp() override {
    dir_.emplace();
    run_ = dir_->path();
    auto global = Store::Open(GlobalStorePath(run_), RunStoreOptions());
    ASSERT_TRUE(global.ok()) << global.status().ToString();
    for (int r = 0; r < kRanks; ++r) {
      auto rank = Store::Open(RankStorePath(run_, r), RunStoreOptions());
      ASSERT_TRUE(rank.ok()) << rank.status().ToString();
      for (int64_t step = 1; step <= (r == 2 ? 6 : 5); ++step) WriteRankSnapshot(**rank, r, step);
    }
    for (int64_t step = 1; step <= 5; ++step) WriteGlobalRecord(**global, step, kRanks);
  }
  void TearDown() override { dir_.reset(); }

  static std::vector<int64_t> Steps(const std::string& path) { return StepsAt(path); }

  // Consistent: every global step is in every rank's store, and `verify`
  // on the run directory says so (exit 0, "ok": true).
  void ExpectConsistent() {
    const std::vector<int64_t> global = Steps(GlobalStorePath(run_));
    for (int r = 0; r < kRanks; ++r) {
      const std::vector<int64_t> local = Steps(RankStorePath(run_, r));
      for (int64_t step : global) {
        EXPECT_NE(std::find(local.begin(), local.end(), step), local.end()) << "rank " << r << " lacks step " << step;
      }
    }
    CliResult verify = RunCli("verify " + run_ + " --json");
    EXPECT_EQ(verify.exit_code, 0) << verify.out;
    if (verify.exit_code == 0) {
      EXPECT_EQ(nlohmann::json::parse(verify.out)["ok"], true);
    }
  }

  std::optional<testing::TempDir> dir_;  // a fresh one per SetUp
  std::string run_;
};

TEST_F(RunDirMutationTest, VerifyChecksEveryRankAndTheGlobalRecords) {
  CliResult ok = RunCli("verify " + run_ + " --json");
  ASSERT_EQ(ok.exit_code, 0) << ok.out;
  nlohmann::json doc = nlohmann::json::parse(ok.out);
  EXPECT_EQ(doc["schema"], "trainsnap.verify-run/1");
  EXPECT_EQ(doc["world_size"], kRanks);
  EXPECT_EQ(doc["global_steps"], nlohmann::json({1, 2, 3, 4, 5}));
  EXPECT_EQ(doc["ranks"][2]["not_global_steps"], nlohmann::json({6}));
  EXPECT_EQ(doc["ranks"][2]["snapshots"], 6);
  EXPECT_EQ(doc["ranks"][0]["tensors"], 5);
  // Rank 1 loses global step 3: exit code 3, naming the rank and step.
  {
    StoreOptions options;
    options.reserve_bytes = 0;
    auto rank = Store::Open(RankStorePath(run_, 1), options);
    ASSERT_TRUE(rank.ok());
    ASSERT_TRUE((*rank)->Delete(3).ok());
  }
  CliResult bad = RunCli("verify " + run_ + " --json");
  EXPECT_EQ(bad.exit_code, 3) << bad.out;
  nlohmann::json problems = nlohmann::json::parse(bad.out.substr(0, bad.out.rfind('}') + 1))["problems"];
  ASSERT_EQ(problems.size(), 1u) << bad.out;
  EXPECT_EQ(problems[0]["store"], "rank-00001");
  EXPECT_EQ(problems[0]["step"], 3);
  EXPECT_EQ(problems[0]["message"], "a global step this rank's store lacks");
  CliResult table = RunCli("verify " + run_);
  EXPECT_EQ(table.exit_code, 3) << table.out;
  EXPECT_NE(table.out.find("trainsnap verify: corruption found: 1 problems (in rank-00001)"), std::string::npos)
      << table.out;
  // --repair is for one store: a usage error.
  CliResult repair = RunCli("verify " + run_ + " --repair");
  EXPECT_EQ(repair.exit_code, 2) << repair.out;
}

TEST_F(RunDirMutationTest, RollbackDeletesLaterStepsEverywhereAndNeverOpensAStoreWithoutConfirmation) {
  // Without --yes and without a terminal: usage error, and no store opened
  // (a held rank store would otherwise be Busy, exit 5).
  {
    StoreOptions options;
    options.reserve_bytes = 0;
    auto held = Store::Open(RankStorePath(run_, 1), options);
    ASSERT_TRUE(held.ok());
    CliResult refused = RunCli("rollback " + run_ + " 2 < /dev/null");
    EXPECT_EQ(refused.exit_code, 2) << refused.out;
    // With --yes the held store is Busy before anything is deleted.
    CliResult busy = RunCli("rollback " + run_ + " 2 --yes");
    EXPECT_EQ(busy.exit_code, 5) << busy.out;
    EXPECT_NE(busy.out.find("rank-00001"), std::string::npos) << busy.out;
  }
  EXPECT_EQ(Steps(GlobalStorePath(run_)), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(Steps(RankStorePath(run_, 0)), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  CliResult dry = RunCli("rollback " + run_ + " 2 --dry-run --json");
  ASSERT_EQ(dry.exit_code, 0) << dry.out;
  nlohmann::json preview = nlohmann::json::parse(dry.out);
  EXPECT_EQ(preview["schema"], "trainsnap.rollback-run/1");
  EXPECT_EQ(preview["deleted_steps"], nlohmann::json({3, 4, 5}));
  EXPECT_EQ(preview["local_only_deleted"], nlohmann::json({nlohmann::json::array(), nlohmann::json::array(), {6}}));
  EXPECT_EQ(Steps(RankStorePath(run_, 2)), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  CliResult done = RunCli("rollback " + run_ + " 2 --yes --json");
  ASSERT_EQ(done.exit_code, 0) << done.out;
  EXPECT_GT(nlohmann::json::parse(done.out)["bytes_reclaimed"].get<uint64_t>(), 0u);
  EXPECT_EQ(Steps(GlobalStorePath(run_)), (std::vector<int64_t>{1, 2}));
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(Steps(RankStorePath(run_, r)), (std::vector<int64_t>{1, 2})) << r;
  ExpectConsistent();
}

// A rollback SIGKILLed after the global records went, after each rank's
// deletion, and in the middle of a garbage collection: the run is
// consistent each time, and the rerun completes.
TEST_F(RunDirMutationTest, RollbackKilledAtEveryStepLeavesAConsistentRunThatARerunFinishes) {
  const std::vector<std::string> kill_points = {"cli.run.after_global", "cli.run.after_rank:1",
                                                "cli.run.after_rank:2", "store.gc_midway"};
  for (const std::string& point : kill_points) {
    SCOPED_TRACE(point);
    TearDown();
    SetUp();
    CliResult killed = RunCli("rollback " + run_ + " 2 --yes", "TRAINSNAP_KILL_POINT=" + point);
    EXPECT_EQ(killed.exit_code, -SIGKILL) << killed.out;
    EXPECT_EQ(Steps(GlobalStorePath(run_)), (std::vector<int64_t>{1, 2}));  // the global records went first
    ExpectConsistent();
    CliResult rerun = RunCli("rollback " + run_ + " 2 --yes");
    EXPECT_EQ(rerun.exit_code, 0) << rerun.out;
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(Steps(RankStorePath(run_, r)), (std::vector<int64_t>{1, 2})) << r;
    ExpectConsistent();
  }
}

TEST_F(RunDirMutationTest, DeletePruneAndGcKeepRanksAndGlobalRecordsConsistent) {
  CliResult deleted = RunCli("delete " + run_ + " 2 4 --json");
  ASSERT_EQ(deleted.exit_code, 0) << deleted.out;
  EXPECT_EQ(nlohmann::json::parse(deleted.out)["deleted_steps"], nlohmann::json({2, 4}));
  EXPECT_EQ(Steps(GlobalStorePath(run_)), (std::vector<int64_t>{1, 3, 5}));
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(Steps(RankStorePath(run_, r)), (std::vector<int64_t>{1, 3, 5})) << r;
  ExpectConsistent();
  // A step that is not global (rank 2's 6 went with the delete) is NotFound.
  CliResult missing = RunCli("delete " + run_ + " 6");
  EXPECT_EQ(missing.exit_code, 4) << missing.out;
  CliResult pruned = RunCli("prune " + run_ + " --keep-last 1");
  ASSERT_EQ(pruned.exit_code, 0) << pruned.out;
  EXPECT_EQ(Steps(GlobalStorePath(run_)), (std::vector<int64_t>{5}));
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(Steps(RankStorePath(run_, r)), (std::vector<int64_t>{5})) << r;
  ExpectConsistent();
  CliResult gc = RunCli("gc " + run_ + " --json");
  ASSERT_EQ(gc.exit_code, 0) << gc.out;
  nlohmann::json doc = nlohmann::json::parse(gc.out);
  EXPECT_EQ(doc["schema"], "trainsnap.gc-run/1");
  EXPECT_EQ(doc["bytes_reclaimed"], 0);  // every deletion collected already
}

TEST_F(RunDirMutationTest, GcDeletesLocalSnapshotsOfStepsThatAreNotGlobal) {
  CliResult gc = RunCli("gc " + run_ + " --json");
  ASSERT_EQ(gc.exit_code, 0) << gc.out;
  nlohmann::json doc = nlohmann::json::parse(gc.out);
  EXPECT_EQ(doc["local_only_deleted"], nlohmann::json({nlohmann::json::array(), nlohmann::json::array(), {6}}));
  EXPECT_GT(doc["bytes_reclaimed"].get<uint64_t>(), 0u);
  EXPECT_EQ(Steps(RankStorePath(run_, 2)), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  ExpectConsistent();
}

// A run resumed on fewer ranks (store API only): global steps 1-3 taken by 3
// ranks, 4-5 by 2; rank store 2 holds steps 1-3, and a stale snapshot of
// step 5 (a step its rank did not take: garbage).
class RunDirResizedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.emplace();
    run_ = dir_->path();
    auto global = Store::Open(GlobalStorePath(run_), RunStoreOptions());
    ASSERT_TRUE(global.ok()) << global.status().ToString();
    for (int r = 0; r < 3; ++r) {
      auto rank = Store::Open(RankStorePath(run_, r), RunStoreOptions());
      ASSERT_TRUE(rank.ok()) << rank.status().ToString();
      for (int64_t step = 1; step <= 5; ++step) {
        if (r < 2 || step <= 3 || step == 5) WriteRankSnapshot(**rank, r, step);
      }
    }
    for (int64_t step = 1; step <= 5; ++step) WriteGlobalRecord(**global, step, step <= 3 ? 3 : 2);
  }
  void TearDown() override { dir_.reset(); }
  std::optional<testing::TempDir> dir_;
  std::string run_;
};

TEST_F(RunDirResizedTest, VerifyChecksEachStepInTheRankStoresOfItsWorldSize) {
  CliResult ok = RunCli("verify " + run_ + " --json");
  ASSERT_EQ(ok.exit_code, 0) << ok.out;
  nlohmann::json doc = nlohmann::json::parse(ok.out);
  EXPECT_EQ(doc["global_steps"], nlohmann::json({1, 2, 3, 4, 5}));
  EXPECT_EQ(doc["ranks"][2]["not_global_steps"], nlohmann::json({5}));
  EXPECT_EQ(doc["ranks"][1]["not_global_steps"], nlohmann::json::array());
  // Rank 1 took step 4: losing it is Corruption naming the rank and step.
  {
    auto rank = Store::Open(RankStorePath(run_, 1), RunStoreOptions());
    ASSERT_TRUE(rank.ok());
    ASSERT_TRUE((*rank)->Delete(4).ok());
  }
  CliResult bad = RunCli("verify " + run_ + " --json");
  EXPECT_EQ(bad.exit_code, 3) << bad.out;
  nlohmann::json problems = nlohmann::json::parse(bad.out.substr(0, bad.out.rfind('}') + 1))["problems"];
  ASSERT_EQ(problems.size(), 1u) << bad.out;
  EXPECT_EQ(problems[0]["store"], "rank-00001");
  EXPECT_EQ(problems[0]["step"], 4);
}

TEST_F(RunDirResizedTest, PruneAndGcDeleteFromTheRankStoresOfEachStep) {
  CliResult pruned = RunCli("prune " + run_ + " --keep-last 2");
  ASSERT_EQ(pruned.exit_code, 0) << pruned.out;
  EXPECT_EQ(StepsAt(GlobalStorePath(run_)), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(StepsAt(RankStorePath(run_, 0)), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(StepsAt(RankStorePath(run_, 1)), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(StepsAt(RankStorePath(run_, 2)), (std::vector<int64_t>{}));  // steps 1-3 dropped, stale 5 garbage
  CliResult verify = RunCli("verify " + run_ + " --json");
  EXPECT_EQ(verify.exit_code, 0) << verify.out;
}

TEST_F(RunDirResizedTest, GcDeletesSnapshotsOfStepsTheirRankDidNotTake) {
  CliResult gc = RunCli("gc " + run_ + " --json");
  ASSERT_EQ(gc.exit_code, 0) << gc.out;
  EXPECT_EQ(nlohmann::json::parse(gc.out)["local_only_deleted"], nlohmann::json::parse("[[], [], [5]]"));
  EXPECT_EQ(StepsAt(RankStorePath(run_, 2)), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(StepsAt(GlobalStorePath(run_)), (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace trainsnap::internal
