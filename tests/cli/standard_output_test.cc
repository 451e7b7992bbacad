// A report that cannot be written to stdout is a failure (exit 1), and a
// deleting command still says on stderr what it deleted.
#include <algorithm>

#include <gtest/gtest.h>

#include "cli_fixture.h"

namespace trainsnap::cli_test {

// Runs the binary with stdout opened on `stdout_path` for writing (e.g.
// "/dev/full"); `out` stays empty, stderr is captured. In cli_fixture.cc.
CliRun RunCliWithStdout(const std::vector<std::string>& args, const std::string& stdout_path);

namespace {

class StandardOutputTest : public CliTest {
 protected:
  void SetUp() override {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    for (int64_t step = 1; step <= 4; ++step) {
      auto info = WriteSnapshot(*store, step, {{0xA, "param", DType::kFloat32, {1024}, FloatBytes(RandomFloats(1024, step))}});
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      new_bytes_.push_back(info->new_bytes);
    }
  }
  std::vector<uint64_t> new_bytes_;  // of steps 1..4
};

TEST_F(StandardOutputTest, ReadingCommandsFailWhenStdoutIsFull) {
  const std::vector<std::vector<std::string>> cases = {
      {"list", StorePath(), "--json"}, {"list", StorePath()},           {"show", StorePath(), "2"},
      {"stats", StorePath(), "--json"}, {"verify", StorePath(), "--json"}, {"diff", StorePath(), "1", "2"},
      {"--help"},                       {"--version"},
  };
  for (const auto& args : cases) {
    CliRun run = RunCliWithStdout(args, "/dev/full");
    EXPECT_EQ(run.exit_code, 1) << args[0] << ": " << run.err;
    EXPECT_NE(run.err.find("write to standard output: No space left on device"), std::string::npos)
        << args[0] << ": " << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  }
  // The same commands succeed on a writable stdout.
  EXPECT_EQ(RunCliWithStdout({"list", StorePath(), "--json"}, "/dev/null").exit_code, 0);
}

TEST_F(StandardOutputTest, DeletingCommandsReportTheDeletionWhenTheReportCannotBeWritten) {
  CliRun del = RunCliWithStdout({"delete", StorePath(), "3", "--json"}, "/dev/full");
  EXPECT_EQ(del.exit_code, 1) << del.err;
  EXPECT_NE(del.err.find("trainsnap delete: deleted 1 snapshot (step 3) and reclaimed " +
                         std::to_string(new_bytes_[2]) + " bytes, but the report was not written: "
                         "write to standard output: No space left on device"),
            std::string::npos)
      << del.err;
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2, 4}));

  CliRun rollback = RunCliWithStdout({"rollback", StorePath(), "2", "--yes"}, "/dev/full");
  EXPECT_EQ(rollback.exit_code, 1) << rollback.err;
  EXPECT_NE(rollback.err.find("deleted 1 snapshot (step 4) and reclaimed " + std::to_string(new_bytes_[3]) + " bytes"),
            std::string::npos)
      << rollback.err;
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2}));

  CliRun prune = RunCliWithStdout({"prune", StorePath(), "--keep-last", "1"}, "/dev/full");
  EXPECT_EQ(prune.exit_code, 1) << prune.err;
  EXPECT_NE(prune.err.find("deleted 1 snapshot (step 1)"), std::string::npos) << prune.err;
  EXPECT_EQ(Steps(), (std::vector<int64_t>{2}));

  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Delete(2).ok());
  }
  CliRun gc = RunCliWithStdout({"gc", StorePath()}, "/dev/full");
  EXPECT_EQ(gc.exit_code, 1) << gc.err;
  EXPECT_NE(gc.err.find("garbage collection reclaimed " + std::to_string(new_bytes_[1]) +
                        " bytes, but the report was not written"),
            std::string::npos)
      << gc.err;
}

TEST_F(StandardOutputTest, ADryRunWithAFullStdoutFailsAndChangesNothing) {
  CliRun run = RunCliWithStdout({"delete", StorePath(), "1", "--dry-run"}, "/dev/full");
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.err.find("No space left on device"), std::string::npos) << run.err;
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace trainsnap::cli_test
