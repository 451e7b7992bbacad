// Command-line parsing, exit codes common to every command, and errors for
// a missing store or step.
#include <filesystem>

#include <gtest/gtest.h>

#include "cli_fixture.h"

namespace trainsnap::cli_test {
namespace {

int Lines(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

TEST(CliMainTest, HelpListsEveryCommandAndTheExitCodes) {
  CliRun run = RunCli({"--help"});
  EXPECT_EQ(run.exit_code, 0);
  for (const char* command : {"list", "show", "diff", "verify", "rollback", "delete", "prune", "gc", "export", "stats"}) {
    EXPECT_NE(run.out.find(command), std::string::npos) << command;
  }
  EXPECT_NE(run.out.find("Exit codes: 0 ok, 1 error, 2 usage"), std::string::npos) << run.out;
  CliRun sub = RunCli({"export", "--help"});
  EXPECT_EQ(sub.exit_code, 0);
  EXPECT_NE(sub.out.find("--format"), std::string::npos);
  CliRun version = RunCli({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("trainsnap ", 0), 0u) << version.out;
}

TEST(CliMainTest, UsageErrorsExitTwo) {
  const std::vector<std::vector<std::string>> cases = {
      {},                                                      // no command
      {"frobnicate"},                                          // unknown command
      {"list"},                                                // missing STORE
      {"list", "/tmp/x", "extra"},                             // extra positional
      {"show", "/tmp/x"},                                      // missing STEP
      {"show", "/tmp/x", "twelve"},                            // STEP not a number
      {"diff", "/tmp/x", "1"},                                 // missing B
      {"verify", "/tmp/x", "3", "--all"},                      // STEP and --all
      {"export", "/tmp/x", "1", "--out", "f"},                 // missing --format
      {"export", "/tmp/x", "1", "--format", "npz", "--out", "f"},  // bad format
      {"export", "/tmp/x", "1", "--format", "torch"},          // missing --out
      {"prune", "/tmp/x"},                                     // missing --keep-last
      {"prune", "/tmp/x", "--keep-last", "0"},                 // keep-last must be >= 1
      {"prune", "/tmp/x", "--keep-last", "2", "--keep-every", "0"},
      {"rollback", "/tmp/x"},                                  // missing STEP
      {"delete", "/tmp/x"},                                    // missing STEP
      {"gc", "/tmp/x", "--bogus"},                             // unknown flag
  };
  for (const auto& args : cases) {
    CliRun run = RunCli(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(run.exit_code, 2) << joined << "\nstderr: " << run.err;
    EXPECT_FALSE(run.err.empty()) << joined;
  }
}

class CliMissingTest : public CliTest {};

TEST_F(CliMissingTest, MissingStoreExitsFourWithOneLine) {
  const std::string missing = Path("no-such-store");
  const std::vector<std::vector<std::string>> cases = {
      {"list", missing},
      {"show", missing, "1"},
      {"diff", missing, "1", "2"},
      {"verify", missing},
      {"rollback", missing, "1", "--yes"},
      {"rollback", missing, "1", "--dry-run"},
      {"delete", missing, "1"},
      {"prune", missing, "--keep-last", "1"},
      {"gc", missing},
      {"export", missing, "1", "--format", "torch", "--out", Path("out.pt")},
      {"stats", missing},
  };
  for (const auto& args : cases) {
    CliRun run = RunCli(args);
    EXPECT_EQ(run.exit_code, 4) << args[0] << ": " << run.err;
    EXPECT_EQ(Lines(run.err), 1) << args[0] << ": " << run.err;
    EXPECT_NE(run.err.find("does not exist"), std::string::npos) << run.err;
    EXPECT_TRUE(run.out.empty()) << run.out;
  }
  // Writing commands never create a store as a side effect.
  EXPECT_FALSE(std::filesystem::exists(missing));
}

TEST_F(CliMissingTest, MissingStepExitsFour) {
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(WriteSnapshot(*store, 10, {{1, "param", DType::kFloat32, {4}, FloatBytes({1, 2, 3, 4})}}).ok());
  }
  const std::vector<std::vector<std::string>> cases = {
      {"show", StorePath(), "11"},
      {"diff", StorePath(), "10", "11"},
      {"diff", StorePath(), "9", "10"},
      {"verify", StorePath(), "11"},
      {"rollback", StorePath(), "11", "--yes"},
      {"delete", StorePath(), "10", "11"},
      {"export", StorePath(), "11", "--format", "safetensors", "--out", Path("x.safetensors")},
  };
  for (const auto& args : cases) {
    CliRun run = RunCli(args);
    EXPECT_EQ(run.exit_code, 4) << args[0] << ": " << run.err;
    EXPECT_EQ(Lines(run.err), 1) << run.err;
    EXPECT_NE(run.err.find("not found"), std::string::npos) << run.err;
    EXPECT_NE(run.err.find("latest step: 10"), std::string::npos) << run.err;
  }
  // delete checked every step before deleting any.
  EXPECT_EQ(Steps(), std::vector<int64_t>{10});
  EXPECT_FALSE(std::filesystem::exists(Path("x.safetensors")));
}

}  // namespace
}  // namespace trainsnap::cli_test
