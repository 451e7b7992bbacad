// rollback, delete, prune, gc: exact reclaimed bytes, confirmation, Busy.
#include <algorithm>
#include <map>

#include <gtest/gtest.h>

#include "cli_fixture.h"

namespace trainsnap::cli_test {
namespace {

class RetentionCommandsTest : public CliTest {
 protected:
  // Steps 1..6: each with its own 4 KiB tensor (one chunk) and a shared one.
  void SetUp() override {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    std::vector<uint8_t> shared = FloatBytes(RandomFloats(1024, 100));
    for (int64_t step = 1; step <= 6; ++step) {
      auto info = WriteSnapshot(*store, step,
                                {{0xA, "param", DType::kFloat32, {1024}, FloatBytes(RandomFloats(1024, step))},
                                 {0xB, "param", DType::kFloat32, {1024}, shared}});
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      new_bytes_[step] = info->new_bytes;
    }
  }
  std::map<int64_t, uint64_t> new_bytes_;
};

TEST_F(RetentionCommandsTest, RollbackWithoutTerminalOrYesRefuses) {
  CliRun run = RunCli({"rollback", StorePath(), "2"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("--yes"), std::string::npos) << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

TEST_F(RetentionCommandsTest, RollbackDryRunChangesNothing) {
  CliRun run = RunCli({"rollback", StorePath(), "2", "--dry-run", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json doc = run.Json();
  EXPECT_EQ(doc["schema"], "trainsnap.rollback/1");
  EXPECT_EQ(doc["dry_run"], true);
  EXPECT_EQ(doc["deleted_steps"], (nlohmann::json{3, 4, 5, 6}));
  EXPECT_EQ(doc["kept"], 2);
  EXPECT_EQ(doc["reclaimable_chunks"], 4);
  EXPECT_EQ(doc["reclaimable_bytes"], new_bytes_[3] + new_bytes_[4] + new_bytes_[5] + new_bytes_[6]);
  EXPECT_EQ(doc["bytes_reclaimed"], 0);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  CliRun human = RunCli({"rollback", StorePath(), "2", "--dry-run"});
  EXPECT_EQ(human.exit_code, 0);
  EXPECT_NE(human.out.find("would delete 4 snapshots"), std::string::npos) << human.out;
}

TEST_F(RetentionCommandsTest, RollbackYesDeletesLaterSnapshotsAndReportsExactBytes) {
  CliRun run = RunCli({"rollback", StorePath(), "2", "--yes", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json doc = run.Json();
  uint64_t expected = new_bytes_[3] + new_bytes_[4] + new_bytes_[5] + new_bytes_[6];
  EXPECT_EQ(doc["deleted_steps"], (nlohmann::json{3, 4, 5, 6}));
  EXPECT_EQ(doc["bytes_reclaimed"], expected);
  EXPECT_EQ(doc["gc"]["bytes_deleted"], expected);
  EXPECT_EQ(doc["gc"]["chunks_deleted"], 4);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2}));
  // Nothing after the latest step: nothing to do.
  CliRun again = RunCli({"rollback", StorePath(), "2", "--yes"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("nothing to delete"), std::string::npos) << again.out;
}

TEST_F(RetentionCommandsTest, RollbackAsksOnATerminal) {
  CliRun no = RunCliOnTerminal({"rollback", StorePath(), "4"}, "n\n");
  EXPECT_EQ(no.exit_code, 1) << no.out;
  EXPECT_NE(no.out.find("delete 2 snapshots (steps 5, 6)"), std::string::npos) << no.out;
  EXPECT_NE(no.out.find("[y/N]"), std::string::npos) << no.out;
  EXPECT_NE(no.out.find("cancelled"), std::string::npos) << no.out;
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));

  CliRun yes = RunCliOnTerminal({"rollback", StorePath(), "4"}, "y\n");
  EXPECT_EQ(yes.exit_code, 0) << yes.out;
  EXPECT_NE(yes.out.find("reclaimed"), std::string::npos) << yes.out;
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST_F(RetentionCommandsTest, DeleteReportsReclaimedBytes) {
  CliRun run = RunCli({"delete", StorePath(), "3", "5", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json doc = run.Json();
  EXPECT_EQ(doc["schema"], "trainsnap.delete/1");
  EXPECT_EQ(doc["deleted_steps"], (nlohmann::json{3, 5}));
  EXPECT_EQ(doc["bytes_reclaimed"], new_bytes_[3] + new_bytes_[5]);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2, 4, 6}));
  CliRun dry = RunCli({"delete", StorePath(), "4", "--dry-run", "--json"});
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_EQ(dry.Json()["reclaimable_bytes"], new_bytes_[4]);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2, 4, 6}));
}

TEST_F(RetentionCommandsTest, PruneKeepsNewestAndMultiples) {
  CliRun dry = RunCli({"prune", StorePath(), "--keep-last", "2", "--keep-every", "2", "--dry-run", "--json"});
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_EQ(dry.Json()["deleted_steps"], (nlohmann::json{1, 3}));
  EXPECT_EQ(Steps().size(), 6u);
  CliRun run = RunCli({"prune", StorePath(), "--keep-last", "2", "--keep-every", "2", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json doc = run.Json();
  EXPECT_EQ(doc["schema"], "trainsnap.prune/1");
  EXPECT_EQ(doc["deleted_steps"], (nlohmann::json{1, 3}));
  // Step 1's shared chunk is still referenced: only the two own chunks go.
  EXPECT_EQ(doc["gc"]["chunks_deleted"], 2);
  EXPECT_EQ(doc["bytes_reclaimed"], dry.Json()["reclaimable_bytes"]);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{2, 4, 5, 6}));
  CliRun human = RunCli({"prune", StorePath(), "--keep-last", "1"});
  EXPECT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("deleted 3 snapshots (2, 4, 5)"), std::string::npos) << human.out;
  EXPECT_EQ(Steps(), (std::vector<int64_t>{6}));
}

TEST_F(RetentionCommandsTest, GcReclaimsWhatDeleteLeft) {
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Delete(4).ok());
  }
  CliRun run = RunCli({"gc", StorePath(), "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.Json()["schema"], "trainsnap.gc/1");
  EXPECT_EQ(run.Json()["bytes_reclaimed"], new_bytes_[4]);
  EXPECT_EQ(run.Json()["gc"]["chunks_deleted"], 1);
  CliRun again = RunCli({"gc", StorePath()});
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_NE(again.out.find("reclaimed 0 B (0 bytes)"), std::string::npos) << again.out;
}

TEST_F(RetentionCommandsTest, MutatingCommandsOnAStoreHeldByAWriterExitFive) {
  auto writer = OpenStore();
  ASSERT_NE(writer, nullptr);
  const std::vector<std::vector<std::string>> cases = {
      {"rollback", StorePath(), "2", "--yes"},
      {"delete", StorePath(), "3"},
      {"prune", StorePath(), "--keep-last", "1"},
      {"gc", StorePath()},
  };
  for (const auto& args : cases) {
    CliRun run = RunCli(args);
    EXPECT_EQ(run.exit_code, 5) << args[0] << ": " << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    EXPECT_NE(run.err.find("held by another process"), std::string::npos) << run.err;
  }
  // Previews are reads: they work during training.
  EXPECT_EQ(RunCli({"rollback", StorePath(), "2", "--dry-run"}).exit_code, 0);
  writer.reset();
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

}  // namespace
}  // namespace trainsnap::cli_test

namespace trainsnap::cli_test {
namespace {

TEST_F(RetentionCommandsTest, ARefusedRollbackPrintsNoDeletion) {
  CliRun script = RunCli({"rollback", StorePath(), "3"});
  EXPECT_EQ(script.exit_code, 2) << script.err;
  EXPECT_TRUE(script.out.empty()) << script.out;
  EXPECT_NE(script.err.find("trainsnap rollback: refusing to roll back to step 3: confirmation required but stdin "
                            "is not a terminal; pass --yes"),
            std::string::npos)
      << script.err;
  // Refused before the store is opened: the same refusal for a missing store.
  CliRun absent = RunCli({"rollback", Path("absent"), "3"});
  EXPECT_EQ(absent.exit_code, 2) << absent.err;
  CliRun declined = RunCliOnTerminal({"rollback", StorePath(), "3"}, "no\n");
  EXPECT_EQ(declined.exit_code, 1) << declined.out;
  EXPECT_NE(declined.out.find("would delete 3 snapshots"), std::string::npos) << declined.out;
  EXPECT_EQ(declined.out.find("deleting"), std::string::npos) << declined.out;
  EXPECT_EQ(declined.out.find("deleted"), std::string::npos) << declined.out;
  EXPECT_NE(declined.out.find("cancelled; nothing was changed"), std::string::npos) << declined.out;
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

// A tensor whose every chunk changes a little per step: with XOR deltas, the
// later snapshots' chunks are deltas whose base is step 1's chunk.
class DeltaPreviewTest : public CliTest {
 protected:
  void SetUp() override {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    std::vector<float> values = RandomFloats(4096, 5);  // 4 chunks of 4 KiB
    for (int64_t step = 1; step <= 5; ++step) {
      for (size_t i = 0; i < values.size(); i += 97) values[i] += 0.25f;
      auto info = WriteSnapshot(*store, step, {{0xA, "param", DType::kFloat32, {4096}, FloatBytes(values)}});
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      infos_.push_back(*info);
    }
    // The premise: steps 2..5 wrote deltas, far smaller than step 1's keyframes.
    for (size_t i = 1; i < infos_.size(); ++i) {
      ASSERT_EQ(infos_[i].new_chunks, 4u);
      ASSERT_LT(infos_[i].new_bytes * 2, infos_[0].new_bytes) << "step " << infos_[i].step << " is not a delta";
    }
  }

  // Dry run, then the real run: the preview must equal what gc reclaimed.
  void ExpectPreviewIsExact(const std::vector<std::string>& args, uint64_t expected_freed, uint64_t expected_unreferenced) {
    std::vector<std::string> dry = args;
    dry.push_back("--dry-run");
    dry.push_back("--json");
    CliRun preview = RunCli(dry);
    ASSERT_EQ(preview.exit_code, 0) << preview.err;
    const nlohmann::json plan = preview.Json();
    EXPECT_EQ(plan["reclaimable_bytes"], expected_freed) << args[0];
    EXPECT_EQ(plan["unreferenced_bytes"], expected_unreferenced) << args[0];
    std::vector<std::string> real = args;
    real.push_back("--json");
    if (args[0] == "rollback") real.push_back("--yes");
    CliRun run = RunCli(real);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const nlohmann::json done = run.Json();
    EXPECT_EQ(done["bytes_reclaimed"].get<uint64_t>(),
              plan["reclaimable_bytes"].get<uint64_t>() + plan["unreferenced_bytes"].get<uint64_t>())
        << args[0];
    EXPECT_EQ(done["gc"]["chunks_deleted"].get<uint64_t>(),
              plan["reclaimable_chunks"].get<uint64_t>() + plan["unreferenced_chunks"].get<uint64_t>())
        << args[0];
  }

  std::vector<SnapshotInfo> infos_;  // steps 1..5
};

TEST_F(DeltaPreviewTest, ChunksKeptAsDeltaBasesAreNotCountedAsFreed) {
  // Step 1's keyframes are the bases of every later delta: deleting step 1
  // frees nothing (the old preview counted all of step 1's bytes).
  ExpectPreviewIsExact({"delete", StorePath(), "1"}, 0, 0);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{2, 3, 4, 5}));
  // Step 2's deltas are nobody's base: all of its bytes go.
  ExpectPreviewIsExact({"delete", StorePath(), "2"}, infos_[1].new_bytes, 0);
  // Rollback to 3 frees the deltas of 4 and 5.
  ExpectPreviewIsExact({"rollback", StorePath(), "3"}, infos_[3].new_bytes + infos_[4].new_bytes, 0);
  // Pruning to the newest frees step 1's keyframes only once nothing kept
  // needs them: never here, since step 3's deltas use them.
  ExpectPreviewIsExact({"prune", StorePath(), "--keep-last", "1"}, 0, 0);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{3}));
}

TEST_F(DeltaPreviewTest, GarbageLeftBeforeIsPreviewedSeparately) {
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Delete(5).ok());  // its deltas stay until a gc
  }
  // Deleting 2..4 leaves step 1, whose keyframes nothing else needs then:
  // the deletion frees the deltas of 2..4; step 5's are already garbage.
  ExpectPreviewIsExact({"delete", StorePath(), "2", "3", "4"},
                       infos_[1].new_bytes + infos_[2].new_bytes + infos_[3].new_bytes, infos_[4].new_bytes);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1}));
  // And deleting the last snapshot frees its keyframes.
  ExpectPreviewIsExact({"delete", StorePath(), "1"}, infos_[0].new_bytes, 0);
}

}  // namespace
}  // namespace trainsnap::cli_test
