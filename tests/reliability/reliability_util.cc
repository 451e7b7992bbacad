#include "reliability/reliability_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/metadata.h>
#include <rocksdb/utilities/options_util.h>

#include "store/keys.h"

namespace trainsnap::testing {
namespace {

// SplitMix64: a cheap, well-mixed deterministic byte source (incompressible,
// so chunks are stored raw).
uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<uint8_t> Bytes(uint64_t seed, size_t n) {
  std::vector<uint8_t> out(n);
  uint64_t state = seed;
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = SplitMix(state);
    std::memcpy(out.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return out;
}

std::vector<rocksdb::ColumnFamilyDescriptor> StoreColumnFamilies(const std::string& path,
                                                                 rocksdb::DBOptions* db_options) {
  rocksdb::ConfigOptions config;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  rocksdb::Status s = rocksdb::LoadLatestOptions(config, path, db_options, &cfs);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return cfs;
}

}  // namespace

std::vector<TensorSpec> StepTensors(int64_t step) {
  const uint64_t s = static_cast<uint64_t>(step);
  std::vector<TensorSpec> out(kTensorsPerStep);
  out[0] = {1, "param", DType::kFloat32, {1500}, Bytes(s * 1000 + 1, 1500 * 4)};
  out[1] = {2, "param", DType::kFloat32, {64, 16}, Bytes(424242, 64 * 16 * 4)};
  out[2] = {3, "param", DType::kInt64, {3}, Bytes(s * 1000 + 3, 3 * 8)};
  return out;
}

std::string StepManifest(int64_t step) { return "manifest of step " + std::to_string(step); }

::testing::AssertionResult StepIsIntact(Store& store, int64_t step) {
  auto manifest = store.Manifest(step);
  if (!manifest.ok()) return ::testing::AssertionFailure() << "step " << step << ": " << manifest.status().ToString();
  if (*manifest != StepManifest(step)) return ::testing::AssertionFailure() << "step " << step << ": wrong manifest";
  auto records = store.Tensors(step);
  if (!records.ok()) return ::testing::AssertionFailure() << "step " << step << ": " << records.status().ToString();
  const std::vector<TensorSpec> expected = StepTensors(step);
  if (records->size() != expected.size()) {
    return ::testing::AssertionFailure() << "step " << step << ": " << records->size() << " tensor records, expected "
                                         << expected.size();
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    const TensorRecord& r = (*records)[i];
    const TensorSpec& e = expected[i];
    if (r.param_id != e.param_id || r.role != "param" || r.dtype != e.dtype || r.shape != e.shape ||
        r.bytes != e.data.size()) {
      return ::testing::AssertionFailure() << "step " << step << ": tensor " << i << " has the wrong record";
    }
    std::vector<uint8_t> got(r.bytes);
    Status s = store.ReadTensor(r, got.data(), got.size());
    if (!s.ok()) return ::testing::AssertionFailure() << "step " << step << ": " << s.ToString();
    if (got != e.data) return ::testing::AssertionFailure() << "step " << step << ": tensor " << i << " differs";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult StoreHoldsExactly(Store& store, const std::vector<int64_t>& steps) {
  auto list = store.List();
  if (!list.ok()) return ::testing::AssertionFailure() << "List: " << list.status().ToString();
  std::vector<int64_t> got;
  for (const SnapshotInfo& info : *list) got.push_back(info.step);
  if (got != steps) {
    auto msg = ::testing::AssertionFailure() << "List() gives [";
    for (int64_t s : got) msg << " " << s;
    msg << " ], expected [";
    for (int64_t s : steps) msg << " " << s;
    return msg << " ]";
  }
  auto latest = store.Latest();
  if (!latest.ok()) return ::testing::AssertionFailure() << "Latest: " << latest.status().ToString();
  if (steps.empty() ? latest->has_value() : (!latest->has_value() || **latest != steps.back())) {
    return ::testing::AssertionFailure() << "Latest() disagrees with List()";
  }
  for (int64_t s : steps) {
    auto r = StepIsIntact(store, s);
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

size_t CountTensorRecords(const std::string& path, int64_t step) {
  rocksdb::DBOptions db_options;
  auto cfs = StoreColumnFamilies(path, &db_options);
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(db_options, path, cfs, &handles, &raw);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return SIZE_MAX;
  std::unique_ptr<rocksdb::DB> db(raw);
  size_t n = 0;
  for (size_t i = 0; i < cfs.size(); ++i) {
    if (cfs[i].name != "tensors") continue;
    const std::string prefix = internal::TensorKeyPrefix(step);
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), handles[i]));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) ++n;
    EXPECT_TRUE(it->status().ok()) << it->status().ToString();
  }
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  return n;
}

void RawWrite(const std::string& path, const std::string& cf, const std::string& key, const std::string* value) {
  rocksdb::DBOptions db_options;
  auto cfs = StoreColumnFamilies(path, &db_options);
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, path, cfs, &handles, &raw);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::unique_ptr<rocksdb::DB> db(raw);
  bool found = false;
  for (size_t i = 0; i < cfs.size(); ++i) {
    if (cfs[i].name != cf) continue;
    found = true;
    rocksdb::WriteOptions wo;
    wo.sync = true;
    s = value ? db->Put(wo, handles[i], key, *value) : db->Delete(wo, handles[i], key);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_TRUE(found) << "no column family " << cf;
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  EXPECT_TRUE(db->Close().ok());
}

std::optional<std::string> RawGet(const std::string& path, const std::string& cf, const std::string& key) {
  rocksdb::DBOptions db_options;
  auto cfs = StoreColumnFamilies(path, &db_options);
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(db_options, path, cfs, &handles, &raw);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return std::nullopt;
  std::unique_ptr<rocksdb::DB> db(raw);
  std::optional<std::string> out;
  for (size_t i = 0; i < cfs.size(); ++i) {
    if (cfs[i].name != cf) continue;
    std::string value;
    s = db->Get(rocksdb::ReadOptions(), handles[i], key, &value);
    EXPECT_TRUE(s.ok() || s.IsNotFound()) << s.ToString();
    if (s.ok()) out = std::move(value);
  }
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  return out;
}

void FlushStore(const std::string& path) {
  rocksdb::DBOptions db_options;
  auto cfs = StoreColumnFamilies(path, &db_options);
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, path, cfs, &handles, &raw);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::FlushOptions fo;
  fo.wait = true;
  s = db->Flush(fo, handles);
  EXPECT_TRUE(s.ok()) << s.ToString();
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  s = db->Close();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

std::map<std::string, std::vector<std::string>> TableFilesByColumnFamily(const std::string& path) {
  rocksdb::DBOptions db_options;
  auto cfs = StoreColumnFamilies(path, &db_options);
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(db_options, path, cfs, &handles, &raw);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::map<std::string, std::vector<std::string>> out;
  if (!s.ok()) return out;
  std::unique_ptr<rocksdb::DB> db(raw);
  std::vector<rocksdb::LiveFileMetaData> files;
  db->GetLiveFilesMetaData(&files);
  for (const rocksdb::LiveFileMetaData& f : files) out[f.column_family_name].push_back(f.relative_filename);
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  return out;
}

std::string RunIsolated(const std::function<std::string()>& fn, unsigned timeout_s) {
  int fds[2];
  if (::pipe(fds) != 0) return std::string("pipe: ") + std::strerror(errno);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(timeout_s);  // a hung child dies of SIGALRM and fails the check
    const std::string out = fn();
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    std::fflush(nullptr);
    ::_exit(0);  // no atexit handlers, no gtest teardown in the child
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    return "the process died of signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) +
           ")" + (out.empty() ? "" : " after: " + out);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "the process exited abnormally: " + out;
  return out;
}

void CopyDir(const std::string& from, const std::string& to) {
  namespace fs = std::filesystem;
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
}

void BuildDamageBaseline(const std::string& path) {
  {
    auto store = Store::Open(path, TestStoreOptions());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (int64_t step = 1; step <= kFlushedSteps; ++step) ASSERT_TRUE(WriteStep(**store, step).ok());
  }
  FlushStore(path);
  {
    auto store = Store::Open(path, TestStoreOptions());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (int64_t step = kFlushedSteps + 1; step <= kDamageSteps; ++step) ASSERT_TRUE(WriteStep(**store, step).ok());
  }
  for (const char* kind : {".pack", ".sst", ".log", "MANIFEST"}) {
    ASSERT_FALSE(FilesOfKind(path, kind).empty()) << "the baseline store has no " << kind << " file";
  }
}

std::vector<std::filesystem::path> FilesOfKind(const std::string& dir, const std::string& kind) {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  // Pack files live in the store's packs/ directory.
  for (const auto& e : fs::directory_iterator(kind == ".pack" ? dir + "/packs" : dir)) {
    const std::string name = e.path().filename().string();
    const bool match = kind == "MANIFEST" ? name.rfind("MANIFEST-", 0) == 0 : e.path().extension() == kind;
    if (match && fs::file_size(e.path()) > 0) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace trainsnap::testing
