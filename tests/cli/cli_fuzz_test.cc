// A property test of the real binary over random argument lists (steps,
// flags, paths, malformed values among them), with a fixed seed and a time
// bound: an invocation that exits non-zero has not changed the store (every
// snapshot's list entry, manifest, tensor records and bytes, and the stored
// chunks, compared exactly), a usage error (exit 2) never opened the store,
// nothing dies of a signal, and every failure is one line on stderr.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include "cli_fixture.h"

namespace trainsnap::cli_test {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kSeed = 20261201;
constexpr int kMaxRuns = 600;
// Runs continue past the time budget until kMinRuns, so that a slow
// machine still explores enough (each run starts a LibTorch process).
constexpr int kMinRuns = 30;
constexpr auto kTimeBudget = std::chrono::seconds(30);

// Everything a command could change, read through the public API.
std::string Fingerprint(const std::string& path) {
  auto opened = Store::OpenReadOnly(path);
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  if (!opened.ok()) return "";
  Store& store = **opened;
  std::ostringstream out;
  auto list = store.List();
  EXPECT_TRUE(list.ok()) << list.status().ToString();
  if (!list.ok()) return "";
  for (const SnapshotInfo& info : *list) {
    out << "step " << info.step << " " << info.created_unix_ms << " " << info.tensors << " " << info.logical_bytes
        << " " << info.chunks << " " << info.stored_bytes << " " << info.new_chunks << " " << info.new_bytes << "\n";
    auto manifest = store.Manifest(info.step);
    EXPECT_TRUE(manifest.ok());
    out << "manifest " << manifest.value_or("?") << "\n";
    auto records = store.Tensors(info.step);
    EXPECT_TRUE(records.ok());
    if (!records.ok()) continue;
    for (const TensorRecord& r : *records) {
      out << r.param_id << " " << r.role << " " << static_cast<int>(r.dtype) << " " << r.bytes;
      for (const ChunkRef& c : r.chunks) out << " " << c.hash.Hex() << "/" << c.stored_bytes;
      std::string bytes(r.bytes, '\0');
      Status s = store.ReadTensor(r, bytes.data(), bytes.size());
      EXPECT_TRUE(s.ok()) << s.ToString();
      out << " " << bytes << "\n";
    }
  }
  auto stats = store.Stats();
  EXPECT_TRUE(stats.ok()) << stats.status().ToString();
  if (stats.ok()) out << "chunks " << stats->chunks << " " << stats->chunk_stored_bytes << "\n";
  return out.str();
}

class CliFuzzTest : public CliTest {
 protected:
  void SetUp() override {
    auto store = Store::Open(Path("pristine"), TestStoreOptions());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    std::vector<float> values = RandomFloats(2048, 1);
    std::vector<uint8_t> shared = FloatBytes(RandomFloats(1024, 2));
    for (int64_t step = 1; step <= 6; ++step) {
      for (size_t i = 0; i < values.size(); i += 101) values[i] += 0.5f;  // deltas against step 1
      ASSERT_TRUE(WriteSnapshot(**store, step,
                                {{0xA, "param", DType::kFloat32, {2048}, FloatBytes(values)},
                                 {0xB, "buffer", DType::kFloat32, {1024}, shared},
                                 {0xA, "exp_avg", DType::kFloat32, {8}, FloatBytes(RandomFloats(8, 10 + step))}})
                      .ok());
    }
    ASSERT_TRUE((*store)->Delete(6).ok());  // garbage for gc to find
    store->reset();
    std::ofstream(Path("file")) << "not a store";
    ASSERT_EQ(mkfifo(Path("fifo").c_str(), 0644), 0);
    fs::create_directory(Path("outdir"));
    Reset();
  }

  void Reset() {
    fs::remove_all(StorePath());
    fs::copy(Path("pristine"), StorePath(), fs::copy_options::recursive);
  }

  std::string Pick(const std::vector<std::string>& pool) { return pool[rng_() % pool.size()]; }

  std::vector<std::string> RandomArgs() {
    static const std::vector<std::string> kCommands = {"list", "show",  "diff", "verify", "rollback", "delete",
                                                       "prune", "gc",   "export", "stats", "bogus",  ""};
    const std::vector<std::string> paths = {StorePath(), StorePath(), StorePath(), Path("absent"), Path("file"),
                                            Path("outdir"), ""};
    static const std::vector<std::string> kSteps = {
        "1", "2", "3", "4", "5", "6", "0", "99", "9223372036854775807",                      // well-formed
        "",  "010", "03", "+2", "-0", "0x3", " 3", "3 ", "3.0", "1e1", "99999999999999999999",  // malformed
        "-2", "--", "three"};
    const std::vector<std::string> outs = {Path("outdir/x.safetensors"), Path("outdir/y.pt"), Path("fifo"),
                                           Path("outdir"), Path("absent/x.pt"), Path("file")};
    std::vector<std::string> args;
    args.push_back(Pick(kCommands));
    if (rng_() % 10 != 0) args.push_back(Pick(paths));
    const int extra = static_cast<int>(rng_() % 6);
    for (int i = 0; i < extra; ++i) {
      switch (rng_() % 12) {
        case 0: case 1: case 2: case 3: args.push_back(Pick(kSteps)); break;
        case 4: args.push_back(Pick({"--json", "--dry-run", "--yes", "-y", "--all", "--bogus"})); break;
        case 5: args.push_back("--keep-last"); args.push_back(Pick(kSteps)); break;
        case 6: args.push_back("--keep-every"); args.push_back(Pick(kSteps)); break;
        case 7: args.push_back("--format"); args.push_back(Pick({"safetensors", "torch", "npz", ""})); break;
        case 8: args.push_back("--out"); args.push_back(Pick(outs)); break;
        case 9: args.push_back("--role"); args.push_back(Pick({"param", "buffer", "exp_avg", "nope"})); break;
        case 10: args.push_back("--model"); args.push_back(Pick({"", "G", "x"})); break;
        default: args.push_back(Pick({"--json", "--dry-run"})); break;
      }
    }
    return args;
  }

  std::mt19937 rng_{kSeed};
};

std::string Joined(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) out += "'" + a + "' ";
  return out;
}

TEST_F(CliFuzzTest, FailuresChangeNothingAndUsageErrorsOpenNothing) {
  std::string baseline = Fingerprint(StorePath());
  ASSERT_FALSE(baseline.empty());
  const auto start = std::chrono::steady_clock::now();
  int runs = 0, failures = 0, usage_errors = 0, changes = 0;
  for (; runs < kMaxRuns && (runs < kMinRuns || std::chrono::steady_clock::now() - start < kTimeBudget); ++runs) {
    // The first runs are fixed, one of each outcome, so that every property
    // below is exercised whatever the random draws and the machine's speed.
    const std::vector<std::vector<std::string>> anchors = {
        {"delete", StorePath(), "2", "--json"},  // changes the store
        {"show", StorePath(), "99"},             // not found: exit 4
        {"rollback", StorePath(), "010", "--yes"},  // usage: exit 2
        {"gc", Path("file")},                    // not a store: fails without changing it
    };
    const std::vector<std::string> args =
        runs < static_cast<int>(anchors.size()) ? anchors[static_cast<size_t>(runs)] : RandomArgs();
    CliRun run = RunCli(args);
    const std::string what = Joined(args) + "-> exit " + std::to_string(run.exit_code) + ": " + run.err;
    ASSERT_GE(run.exit_code, 0) << "killed by a signal: " << what;
    ASSERT_LE(run.exit_code, 5) << what;
    if (run.exit_code == 0) {
      std::string now = Fingerprint(StorePath());
      if (now != baseline) ++changes;
      baseline = now;
      auto store = Store::OpenReadOnly(StorePath());
      ASSERT_TRUE(store.ok());
      auto list = (*store)->List();
      ASSERT_TRUE(list.ok());
      store->reset();
      if (list->size() < 3) {  // keep something to delete
        Reset();
        baseline = Fingerprint(StorePath());
      }
      continue;
    }
    ++failures;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << what;
    EXPECT_EQ(run.err.rfind("trainsnap", 0), 0u) << what;
    ASSERT_EQ(Fingerprint(StorePath()), baseline) << "a failed invocation changed the store: " << what;
    if (run.exit_code == 2) {
      ++usage_errors;
      // The same arguments with the store gone: a usage error found without
      // opening the store is still a usage error.
      std::vector<std::string> moved = args;
      for (std::string& a : moved) {
        if (a == StorePath()) a = Path("absent");
      }
      CliRun again = RunCli(moved);
      EXPECT_EQ(again.exit_code, 2) << "the usage error needed the store: " << what << "\nthen: " << again.err;
    }
  }
  // The premise: the seed explores all three outcomes.
  EXPECT_GE(usage_errors, runs / 10) << runs << " runs";
  EXPECT_GE(failures - usage_errors, 1) << runs << " runs";
  EXPECT_GE(changes, 1) << runs << " runs";
  std::printf("cli fuzz: %d runs, %d failures (%d usage errors), %d changed the store\n", runs, failures, usage_errors,
              changes);
}

}  // namespace
}  // namespace trainsnap::cli_test
