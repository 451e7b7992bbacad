// One mapping from every failure to one exit code and one line on stderr.
#include "cli/exit_code.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "cli_fixture.h"

namespace trainsnap::cli_test {
namespace {

using cli::ErrorLine;
using cli::ExitCode;
using cli::ExitCodeFor;

TEST(ExitCodeTest, EveryStatusCodeHasTheDocumentedExitCode) {
  // The table in docs/cli.md, "Exit codes".
  const std::vector<std::pair<StatusCode, int>> table = {
      {StatusCode::kOk, 0},           {StatusCode::kNotFound, 4},      {StatusCode::kCorruption, 3},
      {StatusCode::kInvalidArgument, 2}, {StatusCode::kContractMismatch, 1}, {StatusCode::kIOError, 6},
      {StatusCode::kNoSpace, 1},      {StatusCode::kBusy, 5},          {StatusCode::kAborted, 1},
      {StatusCode::kNotSupported, 1}, {StatusCode::kAlreadyExists, 1},
  };
  for (const auto& [code, exit_code] : table) {
    EXPECT_EQ(static_cast<int>(ExitCodeFor(Status(code, "x"))), exit_code) << StatusCodeName(code);
  }
}

TEST(ExitCodeTest, ErrorLineNamesTheCommandOnceAndNoContextTwiceInARow) {
  EXPECT_EQ(ErrorLine("verify", Status::IOError("verify: verify: verify /s: step 3: bad")),
            "trainsnap verify: verify /s: step 3: bad");
  EXPECT_EQ(ErrorLine("export", Status::NotFound("step 4: step 4: chunk 1: gone")),
            "trainsnap export: step 4: chunk 1: gone");
  EXPECT_EQ(ErrorLine("list", Status::IOError("line one\nline two")), "trainsnap list: line one line two");
  EXPECT_EQ(ErrorLine("", Status::InvalidArgument("unknown command `x`")), "trainsnap: unknown command `x`");
  // The cause is kept even when it repeats a context.
  EXPECT_EQ(ErrorLine("gc", Status::Aborted("gc: gc")), "trainsnap gc: gc");
}

class CliMessagesTest : public CliTest {};

TEST_F(CliMessagesTest, UnknownCommandSaysItIsUnknown) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"frobnicate"}, {"frobnicate", "/tmp/x", "3"},
                                                                {"--version", "lst"}}) {
    CliRun run = RunCli(args);
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_EQ(run.err.rfind("trainsnap: unknown command `" + args[args[0] == "--version" ? 1 : 0] + "`", 0), 0u)
        << run.err;
    EXPECT_NE(run.err.find("list, show, diff, verify, rollback, delete, prune, gc, export, stats"), std::string::npos)
        << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  }
  CliRun none = RunCli({});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("subcommand is required"), std::string::npos) << none.err;
}

TEST_F(CliMessagesTest, UsageErrorsAreOneLineNamingTheCommand) {
  CliRun run = RunCli({"export", Path("s"), "1", "--format", "npz", "--out", Path("f")});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err.rfind("trainsnap export: usage: ", 0), 0u) << run.err;
  EXPECT_NE(run.err.find("see trainsnap export --help"), std::string::npos) << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
}

TEST_F(CliMessagesTest, ParameterIdsAreHexInErrorsToo) {
  ChunkHash chunk;
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    auto info = WriteSnapshot(*store, 1, {{0xA, "param", DType::kFloat32, {4}, FloatBytes({1, 2, 3, 4})}});
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    auto record = store->Tensor(1, 0xA, "param");
    ASSERT_TRUE(record.ok());
    chunk = record->chunks.at(0).hash;
  }
  CorruptChunk(StorePath(), chunk);
  CliRun run = RunCli({"export", StorePath(), "1", "--format", "safetensors", "--out", Path("x.safetensors")});
  EXPECT_EQ(run.exit_code, 3) << run.err;
  EXPECT_NE(run.err.find("0x000000000000000a"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("param_id 10 "), std::string::npos) << run.err;
  CliRun verify = RunCli({"verify", StorePath(), "--json"});
  EXPECT_EQ(verify.exit_code, 3) << verify.err;
  EXPECT_EQ(verify.Json()["problems"][0]["param_id"], "0x000000000000000a");
}

}  // namespace
}  // namespace trainsnap::cli_test
