// Steps and counts are canonical decimal, checked while parsing: a malformed
// one is a usage error (exit 2) before any store is opened.
#include "cli/arguments.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include <gtest/gtest.h>

#include "cli_fixture.h"

namespace trainsnap::cli_test {
namespace {

using cli::ParseDecimal;

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(ParseDecimalTest, AcceptsCanonicalDecimalOnly) {
  EXPECT_EQ(ParseDecimal("0", kMin, kMax), 0);
  EXPECT_EQ(ParseDecimal("7", kMin, kMax), 7);
  EXPECT_EQ(ParseDecimal("10", kMin, kMax), 10);
  EXPECT_EQ(ParseDecimal("-12", kMin, kMax), -12);
  EXPECT_EQ(ParseDecimal("9223372036854775807", kMin, kMax), kMax);
  EXPECT_EQ(ParseDecimal("-9223372036854775808", kMin, kMax), kMin);
  for (const char* bad : {"", "-", "+", "+5", "-0", "00", "010", "-010", "0x10", "0X1", " 5", "5 ", "\t5", "5\n",
                          "1e3", "3.0", "--5", "+-5", "-+5", "1_000", "9223372036854775808",
                          "-9223372036854775809", "99999999999999999999", "\xef\xbc\x93" /* fullwidth 3 */}) {
    EXPECT_EQ(ParseDecimal(bad, kMin, kMax), std::nullopt) << "`" << bad << "`";
  }
  EXPECT_EQ(ParseDecimal("1", 1, kMax), 1);
  EXPECT_EQ(ParseDecimal("0", 1, kMax), std::nullopt);
  EXPECT_EQ(ParseDecimal("-1", 0, kMax), std::nullopt);
}

class StepArgumentTest : public CliTest {
 protected:
  // Steps 8 and 10: "010" must never reach either (octal 8, or 10 without the zero).
  void SetUp() override {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    for (int64_t step : {8, 10}) {
      ASSERT_TRUE(WriteSnapshot(*store, step, {{1, "param", DType::kFloat32, {4}, FloatBytes({1, 2, 3, 4})}}).ok());
    }
  }
};

// Every malformed value and every command form, each at least once (13 CLI
// processes: value i in form i mod 10); with TRAINSNAP_LONG_TESTS=1 every
// value in every form (130 processes). The cross product took 144 s in CI
// while the tool loaded LibTorch and still takes 7-12 s on a loaded 2-core
// machine without it, over the 10 s a default test may spend here.
TEST_F(StepArgumentTest, MalformedStepsAreUsageErrorsAndChangeNothing) {
  const std::vector<std::string> bad = {"",    "010", "08",  "+8", "-0", "0x8", " 8",  "8 ", "8.0",
                                        "1e1", "８",  "9223372036854775808", "99999999999999999999999"};
  const std::string out = Path("x.safetensors");
  auto forms = [&](const std::string& step) {
    return std::vector<std::vector<std::string>>{
        {"show", StorePath(), step},
        {"diff", StorePath(), step, "10"},
        {"diff", StorePath(), "8", step},
        {"verify", StorePath(), step},
        {"rollback", StorePath(), step, "--yes"},
        {"delete", StorePath(), step},
        {"delete", StorePath(), "10", step},
        {"export", StorePath(), step, "--format", "safetensors", "--out", out},
        {"prune", StorePath(), "--keep-last", step},
        {"prune", StorePath(), "--keep-last", "1", "--keep-every", step},
    };
  };
  const char* long_tests = std::getenv("TRAINSNAP_LONG_TESTS");
  const bool cross_product = long_tests != nullptr && std::string(long_tests) == "1";
  const size_t form_count = forms("").size();
  ASSERT_GE(bad.size(), form_count);  // so that the default run reaches every form
  size_t runs = 0;
  for (size_t i = 0; i < bad.size(); ++i) {
    const auto cases = forms(bad[i]);
    for (size_t f = 0; f < cases.size(); ++f) {
      if (!cross_product && f != i % form_count) continue;
      const auto& args = cases[f];
      CliRun run = RunCli(args);
      ++runs;
      EXPECT_EQ(run.exit_code, 2) << args[0] << " `" << bad[i] << "`: " << run.err;
      EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
      EXPECT_TRUE(run.out.empty()) << run.out;
    }
  }
  EXPECT_EQ(runs, cross_product ? bad.size() * form_count : bad.size());
  CliRun octal = RunCli({"delete", StorePath(), "010"});
  EXPECT_NE(octal.err.find("`010` is not a step"), std::string::npos) << octal.err;
  CliRun count = RunCli({"prune", StorePath(), "--keep-last", "01"});
  EXPECT_NE(count.err.find("`01` is not a count"), std::string::npos) << count.err;
  EXPECT_EQ(Steps(), (std::vector<int64_t>{8, 10}));
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST_F(StepArgumentTest, UsageErrorsNeverOpenTheStore) {
  // The store path does not exist: any open would exit 4 ("does not exist").
  const std::string missing = Path("absent");
  for (const auto& args : std::vector<std::vector<std::string>>{{"show", missing, "010"},
                                                                {"delete", missing, ""},
                                                                {"rollback", missing, "+1", "--yes"},
                                                                {"prune", missing, "--keep-last", "0"}}) {
    CliRun run = RunCli(args);
    EXPECT_EQ(run.exit_code, 2) << args[0] << ": " << run.err;
    EXPECT_EQ(run.err.find("does not exist"), std::string::npos) << run.err;
  }
}

TEST_F(StepArgumentTest, CanonicalStepsInRangeAreRead) {
  CliRun show = RunCli({"show", StorePath(), "10", "--json"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_EQ(show.Json()["info"]["step"], 10);
  // In range but absent: parsed, then not found (exit 4), naming the exact step.
  CliRun max = RunCli({"show", StorePath(), "9223372036854775807"});
  EXPECT_EQ(max.exit_code, 4) << max.err;
  EXPECT_NE(max.err.find("step 9223372036854775807 not found"), std::string::npos) << max.err;
  // A negative step follows `--`.
  CliRun negative = RunCli({"show", StorePath(), "--", "-3"});
  EXPECT_EQ(negative.exit_code, 4) << negative.err;
  EXPECT_NE(negative.err.find("step -3 not found"), std::string::npos) << negative.err;
}

TEST_F(StepArgumentTest, DeleteValidatesEveryStepBeforeDeletingAny) {
  CliRun twice = RunCli({"delete", StorePath(), "8", "8", "--json"});
  EXPECT_EQ(twice.exit_code, 2) << twice.err;
  EXPECT_NE(twice.err.find("step 8 is named twice"), std::string::npos) << twice.err;
  EXPECT_TRUE(twice.out.empty()) << twice.out;
  CliRun later_twice = RunCli({"delete", StorePath(), "8", "10", "8"});
  EXPECT_EQ(later_twice.exit_code, 2) << later_twice.err;
  CliRun missing = RunCli({"delete", StorePath(), "8", "9"});
  EXPECT_EQ(missing.exit_code, 4) << missing.err;
  EXPECT_EQ(Steps(), (std::vector<int64_t>{8, 10}));
  CliRun both = RunCli({"delete", StorePath(), "10", "8", "--json"});
  ASSERT_EQ(both.exit_code, 0) << both.err;
  EXPECT_EQ(both.Json()["deleted_steps"], (nlohmann::json{8, 10}));  // ascending, as named or not
  EXPECT_EQ(Steps(), (std::vector<int64_t>{}));
}

}  // namespace
}  // namespace trainsnap::cli_test
