// The CLI's `trainsnap verify` on damaged stores (it exits 3 on them): for
// each kind of damage of the corruption test (a chunk
// pack flipped or truncated, a table file flipped, the WAL tail damaged, the
// MANIFEST damaged) the real binary runs on a closed store and its exit code
// is checked exactly. Exit codes are documented in docs/cli.md.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "reliability/reliability_util.h"
#include "store/keys.h"
#include "store/rocks_store.h"
#include "testing/temp_dir.h"
#include "testing/file_contents.h"

namespace trainsnap::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kExitOk = 0;
constexpr int kExitCorruption = 3;
constexpr int kExitNotFound = 4;
constexpr int kExitIOError = 6;

struct CliRun {
  int exit_code = -1;  // -1: did not exit normally
  std::string out, err;
};

constexpr uid_t kNobody = 65534;

// Runs the trainsnap binary (no shell), stdin from /dev/null; as user
// `as_user` (its own group too) when not 0, so that file permissions apply
// (root bypasses them).
CliRun RunCli(const std::vector<std::string>& args, const std::string& scratch, uid_t as_user = 0) {
  const std::string out_path = scratch + ".out", err_path = scratch + ".err";
  CliRun run;
  std::vector<std::string> argv_strings = {TRAINSNAP_CLI_PATH};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0) ::_exit(126);
    if (as_user != 0 && (::setgroups(0, nullptr) != 0 || ::setgid(as_user) != 0 || ::setuid(as_user) != 0)) {
      ::_exit(125);
    }
    ::dup2(in, STDIN_FILENO);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) {
    ADD_FAILURE() << "fork/wait: " << std::strerror(errno);
    return run;
  }
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = FileContents(out_path);
  run.err = FileContents(err_path);
  return run;
}

void FlipByte(const fs::path& file, uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
  ASSERT_TRUE(f.good()) << file;
}

class VerifyCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(TRAINSNAP_CLI_PATH)) << TRAINSNAP_CLI_PATH;
    base_ = dir_.Sub("base");
    ASSERT_NO_FATAL_FAILURE(BuildDamageBaseline(base_));
  }

  // Copies the baseline, damages the copy, runs `trainsnap verify` on it.
  CliRun VerifyDamaged(const std::string& name, const std::function<void(const std::string&)>& damage) {
    const std::string path = dir_.Sub(name);
    CopyDir(base_, path);
    damage(path);
    CliRun run = RunCli({"verify", path}, dir_.Sub(name + ".cli"));
    std::printf("[ verify-cli ] %-16s exit %d: %s", name.c_str(), run.exit_code,
                run.err.empty() ? "(no message)\n" : run.err.c_str());
    return run;
  }

  TempDir dir_;
  std::string base_;
};

TEST_F(VerifyCliTest, IntactStoreExitsZero) {
  CliRun run = RunCli({"verify", base_}, dir_.Sub("intact.cli"));
  EXPECT_EQ(run.exit_code, kExitOk) << run.err;
  EXPECT_TRUE(run.err.empty()) << run.err;
}

TEST_F(VerifyCliTest, ChunkPackBitFlipExitsThree) {
  // The middle byte of every pack file: chunk bytes (checked by their XXH3 hash).
  CliRun run = VerifyDamaged("pack_flip", [](const std::string& path) {
    for (const fs::path& f : FilesOfKind(path, ".pack")) FlipByte(f, fs::file_size(f) / 2);
  });
  EXPECT_EQ(run.exit_code, kExitCorruption) << run.err;
}

TEST_F(VerifyCliTest, ChunkPackTruncationExitsThree) {
  CliRun run = VerifyDamaged("pack_cut", [](const std::string& path) {
    for (const fs::path& f : FilesOfKind(path, ".pack")) fs::resize_file(f, fs::file_size(f) / 2);
  });
  EXPECT_EQ(run.exit_code, kExitCorruption) << run.err;
}

TEST_F(VerifyCliTest, TableFileBitFlipExitsThree) {
  CliRun run = VerifyDamaged("sst_flip", [](const std::string& path) {
    for (const fs::path& f : FilesOfKind(path, ".sst")) FlipByte(f, fs::file_size(f) / 3);
  });
  EXPECT_EQ(run.exit_code, kExitCorruption) << run.err;
}

TEST_F(VerifyCliTest, TableFileTruncationExitsThree) {
  CliRun run = VerifyDamaged("sst_cut", [](const std::string& path) {
    for (const fs::path& f : FilesOfKind(path, ".sst")) fs::resize_file(f, fs::file_size(f) / 2);
  });
  EXPECT_EQ(run.exit_code, kExitCorruption) << run.err;
}

TEST_F(VerifyCliTest, ManifestBitFlipExitsThree) {
  CliRun run = VerifyDamaged("manifest_flip", [](const std::string& path) {
    for (const fs::path& f : FilesOfKind(path, "MANIFEST")) FlipByte(f, fs::file_size(f) / 2);
  });
  EXPECT_EQ(run.exit_code, kExitCorruption) << run.err;
}

TEST_F(VerifyCliTest, ManifestTruncationExitsThree) {
  CliRun run = VerifyDamaged("manifest_cut", [](const std::string& path) {
    for (const fs::path& f : FilesOfKind(path, "MANIFEST")) fs::resize_file(f, fs::file_size(f) / 2);
  });
  EXPECT_EQ(run.exit_code, kExitCorruption) << run.err;
}

// A damaged, cut or deleted WAL tail: RocksDB replays it up to the last
// intact record without an error; the store's commit log tells that
// committed snapshots were lost. verify exits 3 naming the loss, gc refuses
// (exit 3) until `verify --acknowledge-loss`; the surviving snapshots are intact.
TEST_F(VerifyCliTest, WalTailDamageIsReportedAsLostCommitsUntilAcknowledged) {
  struct Case {
    std::string name;
    std::function<void(const fs::path&)> damage;
    std::vector<int64_t> kept;
  };
  const std::vector<Case> cases = {
      {"wal_flip", [](const fs::path& f) { FlipByte(f, fs::file_size(f) - 100); }, {1, 2, 3, 4, 5, 6, 7}},
      {"wal_cut", [](const fs::path& f) { fs::resize_file(f, fs::file_size(f) - 100); }, {1, 2, 3, 4, 5, 6, 7}},
      {"wal_deleted", [](const fs::path& f) { fs::remove(f); }, {1, 2, 3, 4, 5, 6}},
  };
  for (const Case& c : cases) {
    CliRun run = VerifyDamaged(c.name, [&](const std::string& path) {
      const auto logs = FilesOfKind(path, ".log");
      ASSERT_EQ(logs.size(), 1u);
      c.damage(logs.back());
    });
    const std::string path = dir_.Sub(c.name);
    EXPECT_EQ(run.exit_code, kExitCorruption) << c.name << ": " << run.err;
    EXPECT_NE(run.out.find("committed snapshots were lost: the commit log records 8 write transactions"),
              std::string::npos)
        << c.name << ": " << run.out;
    CliRun gc = RunCli({"gc", path}, dir_.Sub(c.name + ".gc"));
    EXPECT_EQ(gc.exit_code, kExitCorruption) << c.name << ": " << gc.err;
    EXPECT_NE(gc.err.find("acknowledge it first"), std::string::npos) << gc.err;
    CliRun ack = RunCli({"verify", "--acknowledge-loss", path}, dir_.Sub(c.name + ".ack"));
    EXPECT_EQ(ack.exit_code, kExitOk) << c.name << ": " << ack.out << ack.err;
    EXPECT_NE(ack.out.find("acknowledged lost commits: the commit log recorded 8 write transactions, the database "
                           "holds " + std::to_string(c.kept.size())),
              std::string::npos)
        << ack.out;
    EXPECT_EQ(RunCli({"gc", path}, dir_.Sub(c.name + ".gc2")).exit_code, kExitOk) << c.name;
    auto store = Store::OpenReadOnly(path);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_TRUE(StoreHoldsExactly(**store, c.kept)) << c.name;
  }
}

// Each table file damaged in a data block (which opening the store does not
// read), in every column family (chunk_deps included), is named by `verify
// --all`, which exits 3; damaged together, each is named. (Damage that the
// open reads, like a file's index, refuses the open naming the file:
// TableFileBitFlipExitsThree; so does a damaged meta table, whose record
// every open reads.)
TEST_F(VerifyCliTest, EveryDamagedTableFileIsNamed) {
  // A store with delta chunks, so that chunk_deps has a table file: a tensor
  // that drifts a little per step.
  const std::string deltas = dir_.Sub("deltas");
  {
    StoreOptions options = TestStoreOptions();
    auto store = Store::Open(deltas, options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    std::vector<float> values(4096);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.25f;
    for (int64_t step = 1; step <= 4; ++step) {
      for (size_t i = 0; i < values.size(); i += 64) values[i] += 1.0f;
      ASSERT_TRUE(WriteSnapshot(**store, step,
                                {{1, "param", DType::kFloat32, {static_cast<int64_t>(values.size())}, FloatBytes(values)}})
                      .ok());
    }
  }
  FlushStore(deltas);
  const auto tables = TableFilesByColumnFamily(deltas);
  for (const char* cf : {"meta", "snapshots", "tensors", "chunks", "chunk_deps"}) {
    ASSERT_TRUE(tables.count(cf) && !tables.at(cf).empty()) << "no table file of column family " << cf;
  }
  // A block-based table starts with its first data block.
  constexpr uint64_t kDataBlockOffset = 10;
  std::vector<std::string> all_damaged;
  for (const auto& [cf, files] : tables) {
    const std::string path = dir_.Sub("table_" + cf);
    CopyDir(deltas, path);
    FlipByte(fs::path(path) / files[0], kDataBlockOffset);
    CliRun run = RunCli({"verify", "--all", "--json", path}, dir_.Sub("table_" + cf + ".cli"));
    EXPECT_EQ(run.exit_code, kExitCorruption) << cf << ": " << run.out << run.err;
    if (cf == "meta") {
      // The open reads the meta record: it refuses, naming the file.
      EXPECT_NE(run.err.find(files[0]), std::string::npos) << run.err;
      continue;
    }
    EXPECT_NE(run.out.find("\"file\": \"" + files[0] + "\""), std::string::npos) << cf << ": " << run.out << run.err;
    all_damaged.push_back(files[0]);
  }
  const std::string path = dir_.Sub("tables_all");
  CopyDir(deltas, path);
  for (const std::string& f : all_damaged) FlipByte(fs::path(path) / f, kDataBlockOffset);
  CliRun run = RunCli({"verify", "--all", path}, dir_.Sub("tables_all.cli"));
  EXPECT_EQ(run.exit_code, kExitCorruption) << run.err;
  for (const std::string& f : all_damaged) {
    EXPECT_NE(run.out.find("store file " + f + ": Corruption"), std::string::npos) << f << ": " << run.out << run.err;
  }
}

// `verify --repair` deletes leftover tensor records of a deleted step; the
// store then verifies clean and every snapshot is intact.
TEST_F(VerifyCliTest, RepairDeletesLeftoversAndKeepsEverySnapshot) {
  const std::string path = dir_.Sub("leftovers");
  CopyDir(base_, path);
  for (const TensorSpec& t : StepTensors(3)) {
    auto value = RawGet(path, "tensors", internal::EncodeTensorKey(3, t.param_id, "param"));
    ASSERT_TRUE(value.has_value());
    RawWrite(path, "tensors", internal::EncodeTensorKey(50, t.param_id, "param"), &*value);
  }
  CliRun before = RunCli({"verify", path}, dir_.Sub("leftovers.before"));
  EXPECT_EQ(before.exit_code, kExitCorruption) << before.err;
  EXPECT_NE(before.out.find("3 tensor records of step 50, which has no snapshot record"), std::string::npos)
      << before.out;
  CliRun repair = RunCli({"verify", "--repair", path}, dir_.Sub("leftovers.repair"));
  EXPECT_EQ(repair.exit_code, kExitOk) << repair.out << repair.err;
  EXPECT_NE(repair.out.find("repaired: deleted 3 leftover tensor records of steps 50"), std::string::npos)
      << repair.out;
  EXPECT_EQ(RunCli({"verify", path}, dir_.Sub("leftovers.after")).exit_code, kExitOk);
  auto store = Store::OpenReadOnly(path);
  ASSERT_TRUE(store.ok());
  std::vector<int64_t> all;
  for (int64_t step = 1; step <= kDamageSteps; ++step) all.push_back(step);
  EXPECT_TRUE(StoreHoldsExactly(**store, all));
}

// Permission denied is its own error (exit 6 naming the path), not "held by
// another process": as user nobody, on a store owned by root in a read-only
// location. Reading it (verify) works there.
TEST_F(VerifyCliTest, PermissionDeniedIsAnIOErrorNotBusy) {
  const std::string parent = dir_.Sub("readonly");
  const std::string path = parent + "/store";
  fs::create_directories(parent);
  CopyDir(base_, path);
  // Traversable by everyone; the store directory and its files read-only.
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  ASSERT_EQ(::chmod(parent.c_str(), 0555), 0);
  // Files read-only; directories (packs/) read-only but searchable.
  std::vector<fs::path> subdirs;
  for (const auto& e : fs::recursive_directory_iterator(path)) {
    if (e.is_directory()) {
      subdirs.push_back(e.path());
    } else {
      ASSERT_EQ(::chmod(e.path().c_str(), 0444), 0);
    }
  }
  for (const fs::path& d : subdirs) ASSERT_EQ(::chmod(d.c_str(), 0555), 0);
  ASSERT_EQ(::chmod(path.c_str(), 0555), 0);
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"gc", path}, {"verify", "--repair", path}, {"rollback", "--yes", path, "3"}}) {
    CliRun run = RunCli(args, dir_.Sub("perm.cli"), kNobody);
    EXPECT_EQ(run.exit_code, kExitIOError) << args[0] << ": " << run.err;
    EXPECT_NE(run.err.find("Permission denied"), std::string::npos) << run.err;
    EXPECT_NE(run.err.find(path), std::string::npos) << run.err;
    EXPECT_EQ(run.err.find("held by another"), std::string::npos) << run.err;
  }
  CliRun verify = RunCli({"verify", path}, dir_.Sub("perm.verify"), kNobody);
  EXPECT_EQ(verify.exit_code, kExitOk) << verify.err;
  // A store below a directory nobody may enter: not "does not exist".
  ASSERT_EQ(::chmod(parent.c_str(), 0700), 0);
  CliRun hidden = RunCli({"list", path}, dir_.Sub("perm.hidden"), kNobody);
  EXPECT_EQ(hidden.exit_code, kExitIOError) << hidden.err;
  EXPECT_NE(hidden.err.find("Permission denied"), std::string::npos) << hidden.err;
  ASSERT_EQ(::chmod(parent.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(path.c_str(), 0755), 0);  // so that the fixture can remove it
}

// A pack file the user running verify may not read: every problem is an
// I/O error naming the file and errno, not corruption; exit 6, not 3.
TEST_F(VerifyCliTest, AnUnreadablePackIsAnIOErrorNotCorruption) {
  const std::string path = dir_.Sub("unreadable");
  CopyDir(base_, path);
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  for (const auto& e : fs::recursive_directory_iterator(path)) {
    ASSERT_EQ(::chmod(e.path().c_str(), e.is_directory() ? 0755 : 0644), 0);
  }
  ASSERT_EQ(::chmod(path.c_str(), 0755), 0);
  const std::vector<fs::path> packs = FilesOfKind(path, ".pack");
  ASSERT_FALSE(packs.empty());
  for (const fs::path& f : packs) ASSERT_EQ(::chmod(f.c_str(), 0), 0);
  CliRun run = RunCli({"verify", path}, dir_.Sub("unreadable.cli"), kNobody);
  EXPECT_EQ(run.exit_code, kExitIOError) << run.out << run.err;
  EXPECT_NE(run.err.find("I/O errors"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("Permission denied"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(packs.front().filename().string()), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("no corruption found in what was read"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("corruption found:"), std::string::npos) << run.err;
  EXPECT_NE(run.out.find("I/O errors (files that could not be read; no corruption found)"), std::string::npos)
      << run.out;
  CliRun json = RunCli({"verify", path, "--json"}, dir_.Sub("unreadable.json"), kNobody);
  EXPECT_EQ(json.exit_code, kExitIOError) << json.err;
  EXPECT_NE(json.out.find("\"corruption_problems\": 0"), std::string::npos) << json.out;
  EXPECT_EQ(json.out.find("\"io_error_problems\": 0"), std::string::npos) << json.out;
  // Root reads it: the bytes were whole all along.
  EXPECT_EQ(RunCli({"verify", path}, dir_.Sub("unreadable.root")).exit_code, kExitOk);
}

// A pack file deleted: gc does everything else, exits 0, and says on stderr
// which pack is gone and which snapshots need it, with the ways out; verify
// then reports the damage (exit 3).
TEST_F(VerifyCliTest, GcOnAStoreWithAMissingPackSucceedsAndNamesTheDamagedSnapshots) {
  const std::string path = dir_.Sub("missing_pack");
  CopyDir(base_, path);
  // Pack 1 holds the chunks of steps 1..6, among them a tensor every step
  // shares (steps 7..8 were written by a later open, into pack 2).
  ASSERT_TRUE(fs::remove(path + "/packs/pack-00000001.pack"));
  for (int round = 0; round < 2; ++round) {
    CliRun gc = RunCli({"gc", path}, dir_.Sub("missing_pack.gc" + std::to_string(round)));
    EXPECT_EQ(gc.exit_code, kExitOk) << gc.err;
    EXPECT_NE(gc.err.find("warning: the store is damaged; garbage collection "
                          "did everything else"),
              std::string::npos)
        << gc.err;
    EXPECT_NE(gc.err.find("packs/pack-00000001.pack is missing (left as it is)"), std::string::npos) << gc.err;
    EXPECT_NE(gc.err.find("snapshots that need the lost chunks: 1, 2, 3, 4, 5, 6, 7, 8"), std::string::npos) << gc.err;
    EXPECT_NE(gc.err.find("trainsnap delete STORE 1 2 3 4 5 6 7 8"), std::string::npos) << gc.err;
  }
  CliRun json = RunCli({"gc", path, "--json"}, dir_.Sub("missing_pack.json"));
  EXPECT_EQ(json.exit_code, kExitOk) << json.err;
  EXPECT_NE(json.out.find("\"damaged_steps\": ["), std::string::npos) << json.out;
  EXPECT_EQ(RunCli({"verify", path}, dir_.Sub("missing_pack.verify")).exit_code, kExitCorruption);
}

// A directory a store creation was killed in: every command says so (exit
// 4, not a RocksDB detail or a usage error) and changes nothing.
TEST_F(VerifyCliTest, AnInterruptedCreationIsNamedByEveryCommand) {
  const std::string path = dir_.Sub("half");
  fs::create_directories(path);
  for (const char* name : {"TRAINSNAP_CREATING", "CURRENT", "MANIFEST-000001", "LOCK", "IDENTITY"}) {
    std::ofstream(path + "/" + name) << "x";
  }
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"list", path}, {"verify", path}, {"gc", path}, {"stats", path}, {"delete", path, "1"}}) {
    CliRun run = RunCli(args, dir_.Sub("half.cli"));
    EXPECT_EQ(run.exit_code, kExitNotFound) << args[0] << ": " << run.err;
    EXPECT_NE(run.err.find("store creation was interrupted"), std::string::npos) << args[0] << ": " << run.err;
  }
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(path)) entries += e.is_regular_file() && fs::file_size(e.path()) == 1;
  EXPECT_EQ(entries, 5u);
}

// A run directory whose rank-00000/ is gone: named as a run directory with
// the missing part, not "no trainsnap store ... holds no database".
TEST_F(VerifyCliTest, ARunDirectoryWithoutRankZeroSaysWhatIsMissing) {
  const std::string run_dir = dir_.Sub("run");
  fs::create_directories(run_dir);
  CopyDir(base_, run_dir + "/rank-00001");
  fs::create_directories(run_dir + "/global");
  for (const char* command : {"list", "verify", "gc"}) {
    CliRun run = RunCli({command, run_dir}, dir_.Sub("run.cli"));
    EXPECT_EQ(run.exit_code, kExitNotFound) << command << ": " << run.err;
    EXPECT_NE(run.err.find("is a run directory of a multi-rank run "
                           "(docs/distributed.md) whose rank-00000/ is "
                           "missing (found global/, rank-00001/)"),
              std::string::npos)
        << command << ": " << run.err;
  }
}

}  // namespace
}  // namespace trainsnap::testing
