// Issue 12, store side: a writable open never converts or wipes what is not a
// healthy trainsnap store; permission denied is IOError, not Busy; missing
// files are Corruption; lost commits (a damaged, cut or deleted WAL) are
// reported and stop garbage collection until acknowledged; List()/Latest()
// are checked against the stored count; leftovers of a deleted step are
// repaired. docs/reliability.md describes each.
#include <gtest/gtest.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <rocksdb/db.h>

#include "reliability/reliability_util.h"
#include "store.pb.h"
#include "store/keys.h"
#include "store/records.h"
#include "store/rocks_store.h"
#include "testing/temp_dir.h"
#include "testing/fault_injection_fs.h"
#include "testing/file_contents.h"

namespace trainsnap::testing {
namespace {

namespace fs = std::filesystem;

// Every entry under `dir` (relative path) -> its bytes ("<dir>" for a directory).
std::map<std::string, std::string> Fingerprint(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string rel = fs::relative(e.path(), dir).string();
    out[rel] = e.is_directory() ? "<dir>" : FileContents(e.path());
  }
  return out;
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A store of steps 1..n, closed.
void WriteSteps(const std::string& path, int64_t n) {
  auto store = Store::Open(path, TestStoreOptions());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  for (int64_t step = 1; step <= n; ++step) ASSERT_TRUE(WriteStep(**store, step).ok());
}

// --- #12.2: a writable open changes nothing it cannot prove is a store -------

struct RefusedOpen {
  StatusCode code;
  std::string fragment;
};

// Opens `path` for writing twice (the second open must see what the first
// saw) and read-only once; each fails as `expected`, and no byte, file or
// directory under `path` changed.
void ExpectRefusedAndUnchanged(const std::string& path, const RefusedOpen& expected, bool read_only_too = true) {
  const auto before = Fingerprint(path);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto store = Store::Open(path, TestStoreOptions());
    ASSERT_FALSE(store.ok()) << path << ": attempt " << attempt;
    EXPECT_EQ(store.status().code(), expected.code) << store.status().ToString();
    EXPECT_TRUE(Contains(store.status().message(), expected.fragment)) << store.status().ToString();
    EXPECT_TRUE(Contains(store.status().message(), path)) << store.status().ToString();
  }
  if (read_only_too) {
    auto reader = Store::OpenReadOnly(path);
    ASSERT_FALSE(reader.ok());
    EXPECT_EQ(reader.status().code(), expected.code) << reader.status().ToString();
  }
  EXPECT_EQ(Fingerprint(path), before) << path << " was changed";
}

TEST(OpenSafetyTest, AnotherRocksDbDatabaseIsRefusedAndUnchanged) {
  TempDir dir;
  const std::string path = dir.Sub("other");
  {
    rocksdb::Options options;
    options.create_if_missing = true;
    options.create_missing_column_families = true;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {{rocksdb::kDefaultColumnFamilyName, {}}, {"users", {}}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, path, cfs, &handles, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), handles[1], "alice", "1").ok());
    ASSERT_TRUE(db->Flush(rocksdb::FlushOptions(), handles).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), handles[0], "in-the-wal", "2").ok());
    for (auto* h : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
    ASSERT_TRUE(db->Close().ok());
  }
  ExpectRefusedAndUnchanged(
      path, {StatusCode::kNotSupported, "a RocksDB database that is not a trainsnap store (column families: "
                                        "default, users)"},
      /*read_only_too=*/false);
}

TEST(OpenSafetyTest, StoreWithoutCurrentIsRefusedAndKeepsEveryFile) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  ASSERT_NO_FATAL_FAILURE(BuildDamageBaseline(path));
  const std::string current = FileContents(fs::path(path) / "CURRENT");
  fs::remove(fs::path(path) / "CURRENT");
  ExpectRefusedAndUnchanged(path, {StatusCode::kCorruption, "a trainsnap store whose CURRENT file is missing"});
  // Nothing was deleted: with CURRENT back, every snapshot is there.
  std::ofstream(fs::path(path) / "CURRENT", std::ios::binary) << current;
  auto store = Store::Open(path, TestStoreOptions());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<int64_t> all;
  for (int64_t step = 1; step <= kDamageSteps; ++step) all.push_back(step);
  EXPECT_TRUE(StoreHoldsExactly(**store, all));
}

TEST(OpenSafetyTest, DirectoryOfOtherFilesIsRefusedAndUnchanged) {
  TempDir dir;
  const std::string path = dir.Sub("files");
  fs::create_directories(fs::path(path) / "sub");
  std::ofstream(fs::path(path) / "notes.txt") << "do not delete";
  std::ofstream(fs::path(path) / "sub" / "model.pt") << std::string(5000, 'x');
  ExpectRefusedAndUnchanged(path, {StatusCode::kNotFound, "the directory is not empty and holds no database (`notes.txt`, `sub`)"});
}

TEST(OpenSafetyTest, UnknownFormatVersionAndOtherChunkSizeAreRefusedAndUnchanged) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  ASSERT_NO_FATAL_FAILURE(WriteSteps(path, 2));
  // Fixed options are checked before RocksDB opens the store for writing.
  {
    const auto before = Fingerprint(path);
    StoreOptions other = TestStoreOptions();
    other.chunk_bytes = 8192;
    auto store = Store::Open(path, other);
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << store.status().ToString();
    EXPECT_EQ(Fingerprint(path), before);
  }
  auto value = RawGet(path, "meta", "store");
  ASSERT_TRUE(value.has_value());
  proto::StoreMeta meta;
  ASSERT_TRUE(meta.ParseFromString(*value));
  meta.set_format_version(99);
  const std::string bytes = meta.SerializeAsString();
  RawWrite(path, "meta", "store", &bytes);
  ExpectRefusedAndUnchanged(path, {StatusCode::kNotSupported, "store format version 99 is not supported"});
}

TEST(OpenSafetyTest, OnlyAnEmptyDirectoryOrNothingBecomesAStore) {
  TempDir dir;
  const std::string empty = dir.Sub("empty");
  fs::create_directories(empty);
  StoreOptions no_create = TestStoreOptions();
  no_create.create_if_missing = false;
  auto refused = Store::Open(empty, no_create);
  EXPECT_EQ(refused.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(refused.status().message(), "no store at this path (an empty directory"));
  EXPECT_TRUE(fs::is_empty(empty));
  auto missing = Store::OpenReadOnly(empty);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  {
    auto store = Store::Open(empty, TestStoreOptions());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE(WriteStep(**store, 1).ok());
  }
  auto reopened = Store::Open(empty, TestStoreOptions());
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_TRUE(StoreHoldsExactly(**reopened, {1}));
}

// --- #12.6: permission denied is IOError naming the path, not Busy -------------

// Run as user nobody in a forked child (root bypasses file permissions): a
// writable open of a root-owned store in a read-only location, and of a new
// store in a read-only directory, is IOError naming the path; a read-only
// open of that store works.
TEST(PermissionTest, DeniedIsIOErrorNamingThePathNotBusy) {
  TempDir dir;
  const std::string parent = dir.Sub("readonly");
  const std::string path = parent + "/store";
  ASSERT_NO_FATAL_FAILURE(WriteSteps(path, 2));
  fs::create_directories(dir.Sub("readonly_empty"));
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
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
  ASSERT_EQ(::chmod(parent.c_str(), 0555), 0);
  ASSERT_EQ(::chmod(dir.Sub("readonly_empty").c_str(), 0555), 0);
  const std::string result = RunIsolated([&]() -> std::string {
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) return "cannot become nobody";
    std::string failures;
    auto expect_denied = [&](const std::string& what, const Status& s, const std::string& where) {
      if (s.code() != StatusCode::kIOError || !Contains(s.message(), "Permission denied") ||
          !Contains(s.message(), where)) {
        failures += what + ": got " + s.ToString() + "\n";
      }
    };
    expect_denied("existing store", Store::Open(path, TestStoreOptions()).status(), path);
    expect_denied("new store in a read-only directory", Store::Open(parent + "/new", TestStoreOptions()).status(),
                  parent + "/new");
    expect_denied("empty read-only directory", Store::Open(dir.Sub("readonly_empty"), TestStoreOptions()).status(),
                  dir.Sub("readonly_empty"));
    auto reader = Store::OpenReadOnly(path);
    if (!reader.ok()) return failures + "read-only open: " + reader.status().ToString();
    auto list = (*reader)->List();
    if (!list.ok() || list->size() != 2) failures += "read-only list: " + list.status().ToString() + "\n";
    return failures;
  });
  EXPECT_EQ(result, "");
  ASSERT_EQ(::chmod(parent.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(path.c_str(), 0755), 0);
  EXPECT_TRUE(fs::is_empty(dir.Sub("readonly_empty")));
  EXPECT_FALSE(fs::exists(parent + "/new"));
}

// --- #12.8: a missing file of the store is Corruption, the same everywhere ----

TEST(MissingFileTest, DeletedManifestAndDeletedTableFileAreBothCorruption) {
  TempDir dir;
  const std::string base = dir.Sub("base");
  ASSERT_NO_FATAL_FAILURE(BuildDamageBaseline(base));
  for (const char* kind : {"MANIFEST", ".sst"}) {
    const std::string path = dir.Sub(std::string("no") + kind);
    CopyDir(base, path);
    for (const fs::path& f : FilesOfKind(path, kind)) fs::remove(f);
    auto store = Store::Open(path, TestStoreOptions());
    EXPECT_EQ(store.status().code(), StatusCode::kCorruption) << kind << ": " << store.status().ToString();
    auto reader = Store::OpenReadOnly(path);
    EXPECT_EQ(reader.status().code(), StatusCode::kCorruption) << kind << ": " << reader.status().ToString();
  }
}

TEST(MissingFileTest, MissingPackFileIsCorruptionOnEveryRead) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  ASSERT_NO_FATAL_FAILURE(BuildDamageBaseline(path));
  const auto packs = FilesOfKind(path, ".pack");
  ASSERT_FALSE(packs.empty());
  for (const fs::path& f : packs) fs::remove(f);
  auto store = Store::OpenReadOnly(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  // Step 1's float tensor has a 4096-byte chunk, in a pack file.
  auto record = (*store)->Tensor(1, 1, "param");
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  std::vector<uint8_t> out(record->bytes);
  Status read = (*store)->ReadTensor(*record, out.data(), out.size());
  EXPECT_EQ(read.code(), StatusCode::kCorruption) << read.ToString();
  auto stats = (*store)->Stats();
  EXPECT_EQ(stats.status().code(), StatusCode::kCorruption) << stats.status().ToString();
  auto verify = (*store)->Verify();
  ASSERT_TRUE(verify.ok()) << verify.status().ToString();
  ASSERT_FALSE(verify->ok());
  size_t missing_files = 0;
  for (const VerifyProblem& p : verify->problems) {
    EXPECT_EQ(p.status.code(), StatusCode::kCorruption) << p.status.ToString();
    if (p.store && p.file.size() > 5 && p.file.substr(p.file.size() - 5) == ".pack") ++missing_files;
  }
  EXPECT_EQ(missing_files, packs.size());
}

// --- counts: List()/Latest() are complete or an error --------------------------

uint64_t StoredSnapshotCount(const std::string& path) {
  auto value = RawGet(path, "meta", internal::kCountsKey);
  EXPECT_TRUE(value.has_value());
  if (!value) return UINT64_MAX;
  auto counts = internal::ParseStoreCounts(*value);
  EXPECT_TRUE(counts.ok());
  return counts.ok() ? counts->snapshots : UINT64_MAX;
}

TEST(StoreCountsTest, CountFollowsCommitReplaceDeleteRollbackAndPrune) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  {
    auto store = Store::Open(path, TestStoreOptions());
    ASSERT_TRUE(store.ok());
    for (int64_t step = 1; step <= 6; ++step) ASSERT_TRUE(WriteStep(**store, step).ok());
    ASSERT_TRUE((*store)->Delete(2).ok());
    ASSERT_TRUE((*store)->Rollback(4).ok());      // deletes 5, 6
    ASSERT_TRUE((*store)->Prune({/*keep_last=*/1, 0}).ok());  // deletes 1, 3
    ASSERT_TRUE(WriteStep(**store, 9).ok());
    auto latest = (*store)->Latest();
    ASSERT_TRUE(latest.ok());
    EXPECT_EQ(latest->value_or(-1), 9);
  }
  EXPECT_EQ(StoredSnapshotCount(path), 2u);
  {
    auto store = Store::Open(path, TestStoreOptions());
    ASSERT_TRUE(store.ok());
    EXPECT_TRUE(StoreHoldsExactly(**store, {4, 9}));
    ASSERT_TRUE((*store)->Delete(9).ok());  // the newest: Latest moves back to 4
    auto latest = (*store)->Latest();
    ASSERT_TRUE(latest.ok()) << latest.status().ToString();
    EXPECT_EQ(latest->value_or(-1), 4);
    ASSERT_TRUE((*store)->Delete(4).ok());
    auto empty = (*store)->Latest();
    ASSERT_TRUE(empty.ok()) << empty.status().ToString();
    EXPECT_FALSE(empty->has_value());
  }
  EXPECT_EQ(StoredSnapshotCount(path), 0u);
}

TEST(StoreCountsTest, AMissingSnapshotRecordIsCorruptionNotAShorterList) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  ASSERT_NO_FATAL_FAILURE(WriteSteps(path, 3));
  RawWrite(path, "snapshots", internal::EncodeStepKey(3), nullptr);
  auto store = Store::OpenReadOnly(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto list = (*store)->List();
  EXPECT_EQ(list.status().code(), StatusCode::kCorruption);
  EXPECT_TRUE(Contains(list.status().message(), "the store records 3 snapshots (newest step 3), but a scan of the "
                                                "snapshot records found 2 (newest step 2)"))
      << list.status().ToString();
  auto latest = (*store)->Latest();
  EXPECT_EQ(latest.status().code(), StatusCode::kCorruption) << latest.status().ToString();
  auto verify = (*store)->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_FALSE(verify->ok());
}

// --- repair of leftovers ------------------------------------------------------

TEST(RepairTest, LeftoverTensorRecordsAreDeletedAndNothingLiveIsLost) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  ASSERT_NO_FATAL_FAILURE(WriteSteps(path, 3));
  // Leftovers of a deleted step 100: step 2's tensor records under step 100.
  for (const TensorSpec& t : StepTensors(2)) {
    auto value = RawGet(path, "tensors", internal::EncodeTensorKey(2, t.param_id, "param"));
    ASSERT_TRUE(value.has_value());
    RawWrite(path, "tensors", internal::EncodeTensorKey(100, t.param_id, "param"), &*value);
  }
  auto store = Store::Open(path, TestStoreOptions());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto verify = (*store)->Verify();
  ASSERT_TRUE(verify.ok());
  ASSERT_EQ(verify->problems.size(), 1u);
  EXPECT_TRUE(verify->problems[0].store);
  EXPECT_TRUE(Contains(verify->problems[0].status.message(),
                       "3 tensor records of step 100, which has no snapshot record"))
      << verify->problems[0].status.ToString();
  auto gc = (*store)->CollectGarbage();
  EXPECT_EQ(gc.status().code(), StatusCode::kCorruption);
  EXPECT_TRUE(Contains(gc.status().message(), "`trainsnap verify --repair` deletes them")) << gc.status().ToString();

  auto repaired = (*store)->Repair();
  ASSERT_TRUE(repaired.ok()) << repaired.status().ToString();
  EXPECT_EQ(repaired->steps, std::vector<int64_t>({100}));
  EXPECT_EQ(repaired->tensor_records, 3u);
  auto clean = (*store)->Verify();
  ASSERT_TRUE(clean.ok());
  EXPECT_TRUE(clean->ok()) << clean->problems[0].status.ToString();
  EXPECT_TRUE((*store)->CollectGarbage().ok());
  EXPECT_TRUE(StoreHoldsExactly(**store, {1, 2, 3}));
  auto again = (*store)->Repair();
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->steps.empty());
}

TEST(RepairTest, RefusesWhenTheSnapshotRecordsDisagreeWithTheCount) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  ASSERT_NO_FATAL_FAILURE(WriteSteps(path, 3));
  // Step 2's snapshot record unreadable: its (live) tensor records must not be
  // taken for leftovers.
  RawWrite(path, "snapshots", internal::EncodeStepKey(2), nullptr);
  {
    auto store = Store::Open(path, TestStoreOptions());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto repaired = (*store)->Repair();
    EXPECT_EQ(repaired.status().code(), StatusCode::kCorruption) << repaired.status().ToString();
    EXPECT_TRUE(Contains(repaired.status().message(), "refusing to repair")) << repaired.status().ToString();
  }
  EXPECT_EQ(CountTensorRecords(path, 2), static_cast<size_t>(kTensorsPerStep));
}

// --- lost commits: a damaged, cut or deleted WAL is reported -------------------

TEST(LostCommitsTest, WalDamageIsReportedAndStopsGcUntilAcknowledged) {
  TempDir dir;
  const std::string base = dir.Sub("base");
  ASSERT_NO_FATAL_FAILURE(BuildDamageBaseline(base));  // 1..6 in tables, 7..8 in the WAL
  struct Case {
    std::string name;
    std::function<void(const fs::path&)> damage;
    uint64_t found;  // transactions that survive
  };
  const std::vector<Case> cases = {
      {"wal_flip", [](const fs::path& f) {
         std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
         io.seekp(static_cast<std::streamoff>(fs::file_size(f) - 100));
         io.put('\x5a');
       }, 7},
      {"wal_cut", [](const fs::path& f) { fs::resize_file(f, fs::file_size(f) - 100); }, 7},
      {"wal_zeroed", [](const fs::path& f) { fs::resize_file(f, 0); }, 6},
      {"wal_deleted", [](const fs::path& f) { fs::remove(f); }, 6},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.Sub(c.name);
    CopyDir(base, path);
    const auto logs = FilesOfKind(path, ".log");
    ASSERT_EQ(logs.size(), 1u);
    c.damage(logs[0]);
    std::vector<int64_t> kept;
    for (int64_t step = 1; step <= static_cast<int64_t>(c.found); ++step) kept.push_back(step);
    {
      auto reader = Store::OpenReadOnly(path);
      ASSERT_TRUE(reader.ok()) << reader.status().ToString();
      auto loss = (*reader)->lost_commits();
      ASSERT_TRUE(loss.has_value());
      EXPECT_EQ(loss->recorded, 8u);
      EXPECT_EQ(loss->found, c.found);
      auto verify = (*reader)->Verify();
      ASSERT_TRUE(verify.ok());
      ASSERT_FALSE(verify->ok());
      EXPECT_TRUE(Contains(verify->problems.back().status.message(),
                           "committed snapshots were lost: the commit log records 8 write transactions (newest "
                           "step 8), the database holds " + std::to_string(c.found) + " (newest step " +
                               std::to_string(c.found) + ")"))
          << verify->problems.back().status.ToString();
    }
    {
      auto store = Store::Open(path, TestStoreOptions());
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      ASSERT_TRUE((*store)->lost_commits().has_value());
      EXPECT_TRUE(StoreHoldsExactly(**store, kept));
      auto gc = (*store)->CollectGarbage();
      EXPECT_EQ(gc.status().code(), StatusCode::kCorruption);
      EXPECT_TRUE(Contains(gc.status().message(), "acknowledge it first")) << gc.status().ToString();
      EXPECT_EQ((*store)->Prune({1, 0}).status().code(), StatusCode::kCorruption);
      // Training goes on: a commit works, and does not hide the loss.
      ASSERT_TRUE(WriteStep(**store, 20).ok());
      ASSERT_TRUE(WriteStep(**store, 21).ok());
    }
    {
      auto store = Store::Open(path, TestStoreOptions());
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      auto loss = (*store)->lost_commits();
      ASSERT_TRUE(loss.has_value()) << "the loss was forgotten after more commits";
      EXPECT_EQ(loss->recorded, 8u);
      EXPECT_EQ(loss->found, c.found);
      ASSERT_TRUE((*store)->AcknowledgeLostCommits().ok());
      EXPECT_FALSE((*store)->lost_commits().has_value());
      auto gc = (*store)->CollectGarbage();
      EXPECT_TRUE(gc.ok()) << gc.status().ToString();
    }
    auto store = Store::Open(path, TestStoreOptions());
    ASSERT_TRUE(store.ok());
    EXPECT_FALSE((*store)->lost_commits().has_value());
    kept.push_back(20);
    kept.push_back(21);
    EXPECT_TRUE(StoreHoldsExactly(**store, kept));
    auto verify = (*store)->Verify();
    ASSERT_TRUE(verify.ok());
    EXPECT_TRUE(verify->ok());
  }
}

TEST(LostCommitsTest, IntactStoresReportNoLoss) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  ASSERT_NO_FATAL_FAILURE(BuildDamageBaseline(path));
  auto reader = Store::OpenReadOnly(path);
  ASSERT_TRUE(reader.ok());
  EXPECT_FALSE((*reader)->lost_commits().has_value());
  reader->reset();
  auto store = Store::Open(path, TestStoreOptions());
  ASSERT_TRUE(store.ok());
  EXPECT_FALSE((*store)->lost_commits().has_value());
  EXPECT_TRUE((*store)->AcknowledgeLostCommits().ok());  // nothing to acknowledge
  auto gc = (*store)->CollectGarbage();
  EXPECT_TRUE(gc.ok()) << gc.status().ToString();
}

}  // namespace
}  // namespace trainsnap::testing
