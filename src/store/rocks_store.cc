#include "store/rocks_store.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdarg>
#include <filesystem>
#include <map>
#include <shared_mutex>
#include <thread>

#include <fstream>
#include <set>
#include <sstream>
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <rocksdb/filter_policy.h>
#include <rocksdb/listener.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>
#include <rocksdb/snapshot.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include "store.pb.h"
#include "store/chunk_codec.h"
#include "store/chunk_hash.h"
#include "store/keys.h"
#include "store/kill_point.h"
#include "store/parallel_for.h"
#include "store/rocksdb_status.h"
#include "store/snapshot_writer.h"
#include "store/store_pin.h"
#include "store/thread_priority.h"

namespace trainsnap::internal {
namespace {

namespace fs = std::filesystem;

constexpr char kMetaCf[] = "meta";
constexpr char kSnapshotsCf[] = "snapshots";
constexpr char kTensorsCf[] = "tensors";
constexpr char kChunksCf[] = "chunks";
constexpr char kChunkDepsCf[] = "chunk_deps";
// Meta format versions this build reads; it writes the newest, and a
// writable open upgrades an older store's meta (version 2 only adds delta
// chunks and the chunk_deps CF, which builds that read only version 1
// would misread; version 3 adds the counts record, which older builds would
// leave stale).
constexpr uint32_t kMetaFormatVersion = 3;
// 4: the store holds snapshot records of format version 2 (tensor records in
// record-group chunks), which builds that know 1..3 would misread and whose
// groups their GC would delete. Written by the commit of the first such
// snapshot, in its batch; a store without one stays at version 3.
constexpr uint32_t kGroupedMetaFormatVersion = 4;
constexpr uint32_t kCountsFormatVersion = 3;
constexpr uint32_t kOldestMetaFormatVersion = 1;
constexpr size_t kDefaultDeltaBaseCacheBytes = size_t{1} << 30;
constexpr char kMetaStoreKey[] = "store";
constexpr size_t kDefaultChunkBytes = size_t{1} << 20;
// Chunk sizes a store may be created with: at least the largest element
// (complex128), at most what one RocksDB value comfortably holds.
constexpr size_t kMinChunkBytes = 16;
constexpr size_t kMaxChunkBytes = size_t{1} << 30;
// Values at least this large go to blob files: chunk values are either tiny
// (tails of small tensors) or close to chunk_bytes.
constexpr uint64_t kMinBlobBytes = 4096;

// Reads of chunk values on the restore path skip RocksDB's CRC32C of the
// blob record: every decoded chunk is checked against its XXH3-128 content
// hash, a stronger check of the same bytes, and Debian's librocksdb computes
// CRC32C in software (a third of the restore's CPU, measured). Verify keeps
// both checks.
rocksdb::ReadOptions ChunkReadOptions() {
  rocksdb::ReadOptions options;
  options.verify_checksums = false;
  return options;
}

// Chunk deletions are written in batches of this many keys.
constexpr size_t kGcBatch = 1024;

// Defaults of StoreOptions::max_unflushed_bytes and max_unflushed_commits.
constexpr uint64_t kDefaultMaxUnflushedBytes = uint64_t{16} << 20;
constexpr int kDefaultMaxUnflushedCommits = 16;
// The reserve file (StoreOptions::reserve_bytes). RocksDB ignores files whose
// names it does not know.
constexpr char kReserveFile[] = "SPACE_RESERVE";
// Giving space back relocates the live values of the blob files once the
// garbage in them exceeds this fraction of the live values: blob files then
// stay under 1 + kMaxGarbageRatio times the live bytes.
constexpr double kMaxGarbageRatio = 0.25;
// Per blob file, RocksDB 7.8 writes a 30-byte header and a 32-byte footer;
// per value, a 32-byte record header and the key (16 bytes here).
constexpr uint64_t kBlobFileOverhead = 30 + 32;
constexpr uint64_t kBlobRecordOverhead = 32 + 16;

// Free bytes for an unprivileged writer on the file system of `path`; nullopt
// when statvfs fails.
std::optional<uint64_t> FreeBytes(const std::string& path) {
  struct statvfs st;
  if (::statvfs(path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string StepName(int64_t step) { return "step " + std::to_string(step); }

// How errors name a TensorRead (built only when one is reported).
std::string ReadName(const TensorRead& read) {
  if (!read.name.empty()) return read.name;
  return "read tensor param_id " + ParamIdHex(read.record->param_id) + " role " + read.record->role;
}

// The smallest key greater than every key starting with `prefix`; empty if none.
std::string PrefixUpperBound(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last != 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return prefix;
}

std::vector<rocksdb::ColumnFamilyDescriptor> ColumnFamilies() {
  rocksdb::ColumnFamilyOptions chunks;
  chunks.enable_blob_files = true;
  chunks.min_blob_size = kMinBlobBytes;
  chunks.blob_compression_type = rocksdb::kNoCompression;  // payloads are zstd already
  chunks.compression = rocksdb::kNoCompression;
  // No relocation in automatic compactions: it rewrites live values at
  // times nobody chose, needing free space that a nearly full disk lacks
  // (a background compaction then failed a delete with NoSpace). ReclaimSpace
  // relocates explicitly (BlobGarbageCollectionPolicy::kForce), within the
  // free space it finds.
  chunks.enable_blob_garbage_collection = false;
  // Most look-ups of a new chunk's hash miss: a Bloom filter answers them
  // without reading a data block.
  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  chunks.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {kMetaCf, rocksdb::ColumnFamilyOptions()},
      {kSnapshotsCf, rocksdb::ColumnFamilyOptions()},
      {kTensorsCf, rocksdb::ColumnFamilyOptions()},
      {kChunksCf, chunks},
      {kChunkDepsCf, rocksdb::ColumnFamilyOptions()},
  };
}

// RocksDB's info log is a file in the database directory. On a full disk
// its writer fails, and Debian's librocksdb (built with assertions) aborts the
// process on the next log line. Read-only openers would also replace the
// writer's LOG file. trainsnap reports errors through Status instead.
class DiscardLogger final : public rocksdb::Logger {
 public:
  DiscardLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::HEADER_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
};

// RocksDB's own recovery from a background error (the SstFileManager's
// thread that resumes once space is free, and the resume loop for
// retryable I/O errors such as ENOSPC) races trainsnap's: ReopenLocked closes
// the database, and Close() waits for a recovery in progress, whose flush
// on a still-full disk fails, sleeps 1 s and is rescheduled while recovery
// runs. A writer could wait there for minutes (seen on a full tmpfs). Only
// trainsnap recovers: it reopens on the next write (PrepareWrite).
class NoAutoRecovery final : public rocksdb::EventListener {
 public:
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason /*reason*/, rocksdb::Status /*bg_error*/,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }
};

rocksdb::DBOptions BaseDbOptions() {
  rocksdb::DBOptions o;
  o.paranoid_checks = true;
  static const auto logger = std::make_shared<DiscardLogger>();
  o.info_log = logger;
  o.listeners.push_back(std::make_shared<NoAutoRecovery>());
  o.max_bgerror_resume_count = 0;
  // Snapshot and tensor records are small: their memtables seldom fill, and a
  // WAL file lives until every CF with data in it is flushed. Bound the WAL
  // (RocksDB's default bound is 4x all memtables, ~2.5 GiB here): past this,
  // RocksDB flushes the CFs that pin the oldest WAL file. Writable opens use
  // StoreOptions::max_unflushed_bytes.
  o.max_total_wal_size = kDefaultMaxUnflushedBytes;
  // Replay the WAL into memtables instead of flushing it to table and blob
  // files: a writable open then needs a few KiB (a MANIFEST, an OPTIONS file,
  // a new WAL), not the size of the unflushed WAL, so a store opens on a
  // nearly full disk, and a failed open leaves no partial table files behind.
  // The old WAL files stay until their data is flushed.
  o.avoid_flush_during_recovery = true;
  // No preallocation: RocksDB would fallocate each WAL file in blocks of up
  // to max_total_wal_size (and table files likewise), space that a nearly
  // full disk lacks and that statvfs counts as used.
  o.allow_fallocate = false;
  return o;
}

// What an open found at a store's path.
enum class PathKind {
  kAbsent,    // nothing: a writable open may create a store
  kEmptyDir,  // an empty directory: likewise
  kDatabase,  // a directory with a CURRENT file: a RocksDB database
};

// The entries of a directory that is neither empty nor a database, named for
// an error message: a trainsnap store whose CURRENT file is missing (its
// OPTIONS file names trainsnap's column families), another RocksDB database
// without CURRENT, or unrelated files.
Status DescribeNotADatabase(const std::string& path, const std::vector<std::string>& names,
                            const std::string& context) {
  std::string newest_options;
  bool rocksdb_files = false;
  for (const std::string& n : names) {
    if (n.rfind("OPTIONS-", 0) == 0 && n > newest_options) newest_options = n;
    const std::string ext = fs::path(n).extension().string();
    if (n.rfind("MANIFEST-", 0) == 0 || n == "IDENTITY" || ext == ".sst" || ext == ".blob" || ext == ".log") {
      rocksdb_files = true;
    }
  }
  const std::string unchanged = "; nothing in it was changed";
  if (!newest_options.empty()) {
    std::ifstream in(fs::path(path) / newest_options);
    std::stringstream text;
    text << in.rdbuf();
    const std::string options = text.str();
    bool ours = true;
    for (const char* cf : {kMetaCf, kSnapshotsCf, kTensorsCf, kChunksCf}) {
      ours = ours && options.find(std::string("[CFOptions \"") + cf + "\"]") != std::string::npos;
    }
    if (ours) {
      return Status::Corruption(context + ": a trainsnap store whose CURRENT file is missing (" + newest_options +
                                " names the store's column families); restore CURRENT, or the store from a copy" +
                                unchanged);
    }
    rocksdb_files = true;
  }
  if (rocksdb_files) {
    return Status::Corruption(context + ": a RocksDB database whose CURRENT file is missing, not recognizable as "
                              "a trainsnap store" + unchanged);
  }
  std::string listed;
  const size_t shown = std::min<size_t>(names.size(), 3);
  for (size_t i = 0; i < shown; ++i) listed += (i ? ", `" : "`") + names[i] + "`";
  if (names.size() > shown) listed += ", ... (" + std::to_string(names.size()) + " entries)";
  return Status::NotFound(context + ": no trainsnap store at this path: the directory is not empty and holds no "
                          "database (" + listed + ")" + unchanged);
}

// What is at `path`. Errors name what was found: IOError when it cannot be
// looked at (permission denied), NotFound for a file or a directory of other
// files, Corruption for a database without its CURRENT file.
Result<PathKind> InspectPath(const std::string& path, const std::string& context) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return Status::IOError(context + ": " + ec.message() + " (" + path + ")");
  }
  if (!fs::exists(status)) return PathKind::kAbsent;
  if (!fs::is_directory(status)) return Status::NotFound(context + ": not a trainsnap store (not a directory)");
  std::vector<std::string> names;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  if (ec) return Status::IOError(context + ": list the directory: " + ec.message() + " (" + path + ")");
  if (names.empty()) return PathKind::kEmptyDir;
  std::sort(names.begin(), names.end());
  if (std::binary_search(names.begin(), names.end(), std::string("CURRENT"))) return PathKind::kDatabase;
  return DescribeNotADatabase(path, names, context);
}

// The checks of a meta record against this build and the opener's options.
Status CheckMeta(const proto::StoreMeta& meta, const StoreOptions& options) {
  if (meta.format_version() < kOldestMetaFormatVersion || meta.format_version() > kGroupedMetaFormatVersion) {
    return Status::NotSupported("store format version " + std::to_string(meta.format_version()) +
                                " is not supported (this build reads versions " +
                                std::to_string(kOldestMetaFormatVersion) + ".." +
                                std::to_string(kGroupedMetaFormatVersion) + ")");
  }
  if (meta.hash() != kHashName) {
    return Status::NotSupported("store uses chunk hash \"" + meta.hash() + "\"; this build supports " + kHashName);
  }
  if (meta.chunk_bytes() == 0) return Status::Corruption("meta record: chunk_bytes is 0");
  if (options.chunk_bytes != 0 && options.chunk_bytes != meta.chunk_bytes()) {
    return Status::InvalidArgument("chunk_bytes " + std::to_string(options.chunk_bytes) +
                                   " differs from the store's fixed chunk_bytes " +
                                   std::to_string(meta.chunk_bytes()));
  }
  return Status::OK();
}

std::string OptionalStep(const std::optional<int64_t>& step) {
  return step ? "step " + std::to_string(*step) : "no snapshot";
}

std::string DescribeLoss(const LostCommits& loss) {
  return "committed snapshots were lost: the commit log records " + std::to_string(loss.recorded) +
         " write transactions (newest " + OptionalStep(loss.newest_recorded) + "), the database holds " +
         std::to_string(loss.found) + " (newest " + OptionalStep(loss.newest_found) +
         "); its write-ahead log was damaged, cut or deleted";
}

}  // namespace

// --- open / close ------------------------------------------------------------

Result<std::unique_ptr<Store>> RocksStore::OpenWritable(const std::string& path, const StoreOptions& options,
                                                        rocksdb::Env* env) {
  std::unique_ptr<RocksStore> store(new RocksStore());
  const std::string context = "open store " + path;
  if (options.zstd_level < 0 || options.zstd_level > 19) {
    return Status::InvalidArgument(context + ": zstd_level " + std::to_string(options.zstd_level) +
                                   " is outside 1..19 (0 = 1)");
  }
  if (options.worker_nice < 0 || options.worker_nice > 19) {
    return Status::InvalidArgument(context + ": worker_nice " + std::to_string(options.worker_nice) +
                                   " is outside 0..19");
  }
  if (options.threads < 0) return Status::InvalidArgument(context + ": threads must be >= 0");
  if (options.chunk_bytes != 0 && (options.chunk_bytes < kMinChunkBytes || options.chunk_bytes > kMaxChunkBytes)) {
    return Status::InvalidArgument(context + ": chunk_bytes " + std::to_string(options.chunk_bytes) +
                                   " is outside " + std::to_string(kMinChunkBytes) + ".." +
                                   std::to_string(kMaxChunkBytes));
  }
  if (options.retention.keep_last < 0 || options.retention.keep_every < 0) {
    return Status::InvalidArgument(context + ": retention counts must be >= 0");
  }
  if (options.keyframe_interval < 0 || options.keyframe_interval > kMaxDeltaDepth) {
    return Status::InvalidArgument(context + ": keyframe_interval " + std::to_string(options.keyframe_interval) +
                                   " is outside 0.." + std::to_string(kMaxDeltaDepth));
  }
  if (options.max_unflushed_commits < 0) {
    return Status::InvalidArgument(context + ": max_unflushed_commits must be >= 0");
  }
  const uint64_t unflushed = options.max_unflushed_bytes ? options.max_unflushed_bytes : kDefaultMaxUnflushedBytes;
  if (options.reserve_bytes != 0 && options.reserve_bytes < 2 * unflushed) {
    return Status::InvalidArgument(context + ": reserve_bytes " + std::to_string(options.reserve_bytes) +
                                   " must be 0 or at least twice max_unflushed_bytes " + std::to_string(unflushed));
  }
  if (options.delta_reference != DeltaReference::kKeyframe && options.delta_reference != DeltaReference::kParent) {
    return Status::InvalidArgument(context + ": unknown delta_reference " +
                                   std::to_string(static_cast<int>(options.delta_reference)));
  }
  // A store is created only where nothing is, or in an empty directory;
  // anything else must prove to be a trainsnap store of a known version
  // before RocksDB opens it for writing (which writes a new MANIFEST, a WAL,
  // flushes and deletes files it does not list).
  TRAINSNAP_ASSIGN_OR_RETURN(const PathKind kind, InspectPath(path, context));
  const bool create = kind != PathKind::kDatabase;
  if (create) {
    if (!options.create_if_missing) {
      return Status::NotFound(context + ": no store at this path (" +
                              (kind == PathKind::kAbsent ? "it does not exist" : "an empty directory") +
                              "; create_if_missing is false)");
    }
    // RocksDB creates only the last path component.
    std::error_code ec;
    fs::create_directories(path, ec);
    if (ec) return Status::IOError(context + ": create directory: " + ec.message() + " (" + path + ")");
  } else {
    TRAINSNAP_RETURN_IF_ERROR(CheckExistingStore(path, options, env).WithContext(context));
  }
  store->zstd_level_ = options.zstd_level == 0 ? 1 : options.zstd_level;
  store->compress_ = options.compress;
  store->sync_ = options.sync;
  store->options_ = options;
  // Only a new store may be created by RocksDB: an existing one whose
  // CURRENT file vanished since the check must not be replaced.
  store->options_.create_if_missing = create;
  store->env_ = env;
  store->retention_ = options.retention;
  store->keyframe_interval_ = options.keyframe_interval;
  store->delta_reference_ = options.delta_reference;
  store->delta_bases_.SetBudget(options.delta_base_cache_bytes ? options.delta_base_cache_bytes
                                                               : kDefaultDeltaBaseCacheBytes);
  store->threads_ = options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  Status opened = store->OpenDb(path, store->options_, /*read_only=*/false, env);
  if (opened.code() == StatusCode::kNoSpace) {
    // Even the few KiB an open writes did not fit: this is what the reserve
    // file is for (the open comes before any delete).
    std::error_code ec;
    if (fs::remove(fs::path(path) / kReserveFile, ec)) opened = store->OpenDb(path, store->options_, /*read_only=*/false, env);
  }
  TRAINSNAP_RETURN_IF_ERROR(opened);
  if (options.worker_nice > 0) {
    Status s = LowerPoolPriority(*store->pool_, static_cast<size_t>(store->threads_), options.worker_nice);
    if (!s.ok()) return s.WithContext(context + ": lower the worker threads' priority");
    // RocksDB's thread pools belong to its Env (process-wide for the default
    // one) and take only coarse priorities: kLow is nice 19.
    rocksdb::Env* rocks_env = env != nullptr ? env : rocksdb::Env::Default();
    for (auto pool : {rocksdb::Env::Priority::HIGH, rocksdb::Env::Priority::LOW}) {
      rocksdb::Status rs = rocks_env->LowerThreadPoolCPUPriority(pool, rocksdb::CpuPriority::kLow);
      if (!rs.ok() && !rs.IsNotSupported()) return FromRocks(rs, context + ": lower RocksDB's thread priority");
    }
  }
  Status s = store->LoadOrCreateMeta(options);
  if (!s.ok()) return s.WithContext(context);
  // A damaged commit log (both slots torn) is rewritten from the database:
  // it can then no longer tell what was lost before (docs/reliability.md).
  auto log = CommitLog::Read(path);
  if (!log.ok() && log.status().code() != StatusCode::kCorruption) return log.status().WithContext(context);
  s = store->CheckCommitLog(log.ok() ? *log : std::nullopt);
  if (!s.ok()) return s.WithContext(context);
  s = store->WarmChunkSizes();
  if (!s.ok()) return s.WithContext(context);
  store->RestoreReserve();
  return std::unique_ptr<Store>(std::move(store));
}

Status RocksStore::CheckExistingStore(const std::string& path, const StoreOptions& options, rocksdb::Env* env) {
  rocksdb::DBOptions db_options = BaseDbOptions();
  if (env) db_options.env = env;
  std::vector<std::string> names;
  TRAINSNAP_RETURN_IF_ERROR(
      FromRocks(rocksdb::DB::ListColumnFamilies(db_options, path, &names), "list column families", path));
  for (const char* cf : {kMetaCf, kSnapshotsCf, kTensorsCf, kChunksCf}) {
    if (std::find(names.begin(), names.end(), cf) != names.end()) continue;
    std::string found;
    for (const std::string& n : names) found += (found.empty() ? "" : ", ") + n;
    return Status::NotSupported("a RocksDB database that is not a trainsnap store (column families: " + found +
                                "); nothing in it was changed");
  }
  RocksStore probe;
  probe.read_only_ = true;
  probe.env_ = env;
  probe.threads_ = 1;
  TRAINSNAP_RETURN_IF_ERROR(probe.OpenDb(path, StoreOptions(), /*read_only=*/true, env));
  std::string value;
  rocksdb::Status s = probe.db_->Get(rocksdb::ReadOptions(), probe.meta_cf_, kMetaStoreKey, &value);
  if (s.IsNotFound()) {
    // A creation that stopped after RocksDB made the column families and
    // before the meta record: the writable open finishes it. With data in
    // them it is no store this build wrote.
    for (rocksdb::ColumnFamilyHandle* cf : {probe.snapshots_cf_, probe.tensors_cf_, probe.chunks_cf_}) {
      std::unique_ptr<rocksdb::Iterator> it(probe.db_->NewIterator(rocksdb::ReadOptions(), cf));
      it->SeekToFirst();
      TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan " + cf->GetName()));
      if (it->Valid()) {
        return Status::Corruption("the store holds " + cf->GetName() + " records but no meta record");
      }
    }
    return Status::OK();
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "read meta record"));
  proto::StoreMeta meta;
  if (!meta.ParseFromString(value)) return Status::Corruption("meta record does not parse");
  return CheckMeta(meta, options);
}

Status RocksStore::WarmChunkSizes() {
  // The next snapshot mostly references the chunks of the latest one
  // (frozen and unchanged tensors). Knowing their sizes up front saves a
  // blob read per deduplicated chunk on the first capture after opening.
  // Best effort: a damaged record must not keep the store from opening
  // (Verify and reads report it).
  auto latest = Latest();
  if (!latest.ok() || !latest->has_value()) return Status::OK();
  auto records = Tensors(**latest);
  if (!records.ok()) return Status::OK();
  for (const TensorRecord& r : *records) {
    for (const ChunkRef& c : r.chunks) registry_.NoteStored(c.hash, c.stored_bytes);
  }
  return Status::OK();
}

Result<std::unique_ptr<Store>> RocksStore::OpenReadOnlyInstance(const std::string& path, rocksdb::Env* env) {
  const std::string context = "open store " + path + " read-only";
  TRAINSNAP_ASSIGN_OR_RETURN(const PathKind kind, InspectPath(path, context));
  if (kind != PathKind::kDatabase) {
    return Status::NotFound(context + ": no store at this path" +
                            (kind == PathKind::kEmptyDir ? " (an empty directory)" : ""));
  }
  std::unique_ptr<RocksStore> store(new RocksStore());
  store->read_only_ = true;
  store->env_ = env;
  store->threads_ = std::max(1u, std::thread::hardware_concurrency());
  // The commit log first: the writer appends to it after each commit, so a
  // log read before the database was opened never records more than the
  // database then holds, unless commits were really lost.
  auto log = CommitLog::Read(path);
  TRAINSNAP_RETURN_IF_ERROR(store->OpenDb(path, StoreOptions(), /*read_only=*/true, env));
  Status s = store->LoadOrCreateMeta(StoreOptions());
  if (!s.ok()) return s.WithContext(context);
  // A log that cannot be read (damaged) only disables the check here;
  // Verify reports it.
  s = store->CheckCommitLog(log.ok() ? *log : std::nullopt);
  if (!s.ok()) return s.WithContext(context);
  return std::unique_ptr<Store>(std::move(store));
}

Status RocksStore::OpenRocks(const std::string& path, const StoreOptions& options, bool read_only, rocksdb::Env* env,
                             DbHandles* out) {
  rocksdb::DBOptions db_options = BaseDbOptions();
  if (env) db_options.env = env;
  auto cfs = ColumnFamilies();
  if (read_only) {
    // A store written before delta chunks has no chunk_deps CF; a read-only
    // instance cannot create it (and needs none: such a store has no deltas).
    std::vector<std::string> names;
    if (rocksdb::DB::ListColumnFamilies(db_options, path, &names).ok() &&
        std::find(names.begin(), names.end(), kChunkDepsCf) == names.end()) {
      cfs.pop_back();
    }
    // Not a secondary instance: RocksDB 7.8 does not support BlobDB there
    // (reading a blob crashes on a null DB session id). A read-only instance
    // sees the store as of its open; Refresh() reopens it.
    // The WAL files in the directory. The writer deletes a WAL file after
    // a flush made it obsolete (after writing the MANIFEST that says so).
    auto wal_files = [&path]() {
      std::vector<std::string> names;
      std::error_code ec;
      for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
        if (e.path().extension() == ".log") names.push_back(e.path().filename().string());
      }
      std::sort(names.begin(), names.end());
      return names;
    };
    rocksdb::Status s;
    for (int attempt = 0; attempt < 10; ++attempt) {
      const std::vector<std::string> before = wal_files();
      rocksdb::DB* db = nullptr;
      out->handles.clear();
      s = rocksdb::DB::OpenForReadOnly(db_options, path, cfs, &out->handles, &db,
                                       /*error_if_wal_file_exists=*/false);
      if (s.ok()) {
        // A WAL file deleted while we opened may have been read from an
        // older MANIFEST and then not found: a torn view (records without
        // their chunks). Only a view with every WAL file still there is
        // whole; otherwise open again.
        const std::vector<std::string> after = wal_files();
        if (std::includes(after.begin(), after.end(), before.begin(), before.end())) {
          out->db = db;
          return Status::OK();
        }
        for (rocksdb::ColumnFamilyHandle* cf : out->handles) db->DestroyColumnFamilyHandle(cf).PermitUncheckedError();
        db->Close().PermitUncheckedError();
        delete db;
        out->handles.clear();
        s = rocksdb::Status::IOError("the writer deleted WAL files during every attempt to open");
        continue;
      }
      // The writer may delete an obsolete WAL or table file while we list
      // them (a missing table file reads as Corruption with paranoid checks).
      const bool missing_file = s.ToString().find("No such file") != std::string::npos;
      if (!s.IsIOError() && !s.IsNotFound() && !s.IsPathNotFound() && !missing_file) break;
    }
    return FromRocks(s, "open store " + path + " read-only", path);
  }
  db_options.create_if_missing = options.create_if_missing;
  db_options.create_missing_column_families = true;
  db_options.max_total_wal_size = options.max_unflushed_bytes ? options.max_unflushed_bytes : kDefaultMaxUnflushedBytes;
  rocksdb::OptimisticTransactionDB* db = nullptr;
  rocksdb::Status s = rocksdb::OptimisticTransactionDB::Open(db_options, path, cfs, &out->handles, &db);
  if (!s.ok()) return FromRocks(s, "open store " + path, path);
  out->txn_db = db;
  out->db = db;
  return Status::OK();
}

void RocksStore::CloseRocks(DbHandles* h) {
  if (!h->db) return;
  for (rocksdb::ColumnFamilyHandle* cf : h->handles) h->db->DestroyColumnFamilyHandle(cf).PermitUncheckedError();
  h->db->Close().PermitUncheckedError();
  delete h->db;
  *h = DbHandles();
}

Status RocksStore::OpenDb(const std::string& path, const StoreOptions& options, bool read_only, rocksdb::Env* env) {
  path_ = path;
  pool_ = std::make_unique<boost::asio::thread_pool>(threads_);
  DbHandles h;
  TRAINSNAP_RETURN_IF_ERROR(OpenRocks(path, options, read_only, env, &h));
  Adopt(h);
  return Status::OK();
}

void RocksStore::Adopt(const DbHandles& h) {
  ResetTensorCache();
  txn_db_ = h.txn_db;
  db_ = h.db;
  handles_ = h.handles;
  const bool open = handles_.size() >= 5;
  meta_cf_ = open ? handles_[1] : nullptr;
  snapshots_cf_ = open ? handles_[2] : nullptr;
  tensors_cf_ = open ? handles_[3] : nullptr;
  chunks_cf_ = open ? handles_[4] : nullptr;
  chunk_deps_cf_ = handles_.size() >= 6 ? handles_[5] : nullptr;
}

Status RocksStore::LoadOrCreateMeta(const StoreOptions& options) {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_cf_, kMetaStoreKey, &value);
  if (s.IsNotFound()) {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), snapshots_cf_));
    it->SeekToFirst();
    if (it->Valid()) return Status::Corruption("the store holds snapshots but no meta record");
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan snapshot records"));
    if (read_only_) return Status::NotFound("not a trainsnap store (no meta record)");
    proto::StoreMeta meta;
    meta.set_format_version(kMetaFormatVersion);
    meta.set_chunk_bytes(options.chunk_bytes ? options.chunk_bytes : kDefaultChunkBytes);
    meta.set_hash(kHashName);
    meta.set_created_unix_ms(NowUnixMs());
    rocksdb::WriteBatch batch;
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Put(meta_cf_, kMetaStoreKey, meta.SerializeAsString()), "meta"));
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Put(meta_cf_, kCountsKey, SerializeStoreCounts({})), "counts"));
    rocksdb::WriteOptions wo;
    wo.sync = true;
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(db_->Write(wo, &batch), "write meta record"));
    chunk_bytes_ = meta.chunk_bytes();
    format_version_ = meta.format_version();
    return Status::OK();
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "read meta record"));
  proto::StoreMeta meta;
  if (!meta.ParseFromString(value)) return Status::Corruption("meta record does not parse");
  TRAINSNAP_RETURN_IF_ERROR(CheckMeta(meta, options));
  chunk_bytes_ = meta.chunk_bytes();
  format_version_ = meta.format_version();
  if (!read_only_ && meta.format_version() < kMetaFormatVersion) {
    // This writer may add delta chunks and keeps the counts record: builds
    // that know only older versions must refuse the store rather than
    // misread it or leave the counts stale. The counts of an older store
    // come from one scan (its records carry no count to check it against).
    TRAINSNAP_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListSteps(nullptr, /*check_counts=*/false));
    StoreCountsData counts;
    counts.snapshots = steps.size();
    if (!steps.empty()) counts.newest_step = steps.back();
    meta.set_format_version(kMetaFormatVersion);
    rocksdb::WriteBatch batch;
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Put(meta_cf_, kMetaStoreKey, meta.SerializeAsString()), "meta"));
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Put(meta_cf_, kCountsKey, SerializeStoreCounts(counts)), "counts"));
    rocksdb::WriteOptions wo;
    wo.sync = true;
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(db_->Write(wo, &batch), "upgrade meta record to format version " +
                                                                     std::to_string(kMetaFormatVersion)));
    format_version_ = kMetaFormatVersion;
  }
  return Status::OK();
}

Result<std::optional<StoreCountsData>> RocksStore::ReadCounts(const rocksdb::Snapshot* at) {
  if (format_version_ < kCountsFormatVersion) return std::optional<StoreCountsData>();
  rocksdb::ReadOptions ro;
  ro.snapshot = at;
  std::string value;
  rocksdb::Status s = db_->Get(ro, meta_cf_, kCountsKey, &value);
  if (s.IsNotFound()) return Status::Corruption("the counts record is missing");
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "read the counts record"));
  TRAINSNAP_ASSIGN_OR_RETURN(StoreCountsData counts, ParseStoreCounts(value));
  return std::optional<StoreCountsData>(counts);
}

Status RocksStore::CheckListed(const rocksdb::Snapshot* at, std::optional<uint64_t> found,
                               std::optional<int64_t> newest) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::optional<StoreCountsData> counts, ReadCounts(at));
  if (!counts) return Status::OK();
  if ((found && *found != counts->snapshots) || newest != counts->newest_step) {
    return Status::Corruption(
        "the store records " + std::to_string(counts->snapshots) + " snapshots (newest " +
        OptionalStep(counts->newest_step) + "), but a scan of the snapshot records found " +
        (found ? std::to_string(*found) + " (newest " + OptionalStep(newest) + ")" : "newest " + OptionalStep(newest)) +
        ": a read of the store's files failed or the store is damaged (run `trainsnap verify`)");
  }
  return Status::OK();
}

Status RocksStore::PutCounts(rocksdb::WriteBatch* batch, const StoreCountsData& counts) {
  return FromRocks(batch->Put(meta_cf_, kCountsKey, SerializeStoreCounts(counts)), "write the counts record");
}

Status RocksStore::CheckCommitLog(const std::optional<CommitLogState>& log) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::optional<StoreCountsData> counts, ReadCounts(nullptr));
  if (!counts) return Status::OK();  // a read-only open of a store older than the counts
  std::optional<LostCommits> loss;
  if (log && log->loss) {
    loss = log->loss;  // found before, not yet acknowledged
  } else if (log && log->transactions > counts->transactions) {
    LostCommits l;
    l.recorded = log->transactions;
    l.found = counts->transactions;
    l.newest_recorded = log->newest_step;
    l.newest_found = counts->newest_step;
    loss = l;
  }
  {
    std::lock_guard<std::mutex> lock(lost_mu_);
    lost_ = loss;
  }
  if (read_only_) return Status::OK();
  // The log restarts from what the database holds, the loss kept in it.
  CommitLogState state{counts->transactions, counts->newest_step, loss};
  auto opened = CommitLog::Open(path_, sync_, state);
  if (!opened.ok()) return opened.status();
  commit_log_ = std::move(*opened);
  return Status::OK();
}

Status RocksStore::NoteTransaction(const StoreCountsData& counts) {
  if (!commit_log_) return Status::OK();
  CommitLogState state{counts.transactions, counts.newest_step, lost_commits()};
  return commit_log_->Write(state).WithContext("record the transaction in the commit log");
}

std::optional<LostCommits> RocksStore::lost_commits() {
  std::lock_guard<std::mutex> lock(lost_mu_);
  return lost_;
}

Status RocksStore::CheckNoLostCommits(std::string_view what) {
  std::optional<LostCommits> loss = lost_commits();
  if (!loss) return Status::OK();
  return Status::Corruption(std::string(what) + ": " + DescribeLoss(*loss) +
                            "; garbage collection would make the loss permanent: acknowledge it first "
                            "(Store::AcknowledgeLostCommits, `trainsnap verify --acknowledge-loss`)");
}

Status RocksStore::AcknowledgeLostCommits() {
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable("acknowledge lost commits"));
  std::lock_guard<std::mutex> lock(commit_mu_);
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  if (!lost_commits()) return Status::OK();
  auto counts = ReadCounts(nullptr);
  if (!counts.ok()) return counts.status().WithContext("acknowledge lost commits");
  CommitLogState state{(*counts)->transactions, (*counts)->newest_step, std::nullopt};
  TRAINSNAP_RETURN_IF_ERROR(commit_log_->Write(state).WithContext("acknowledge lost commits"));
  std::lock_guard<std::mutex> lost_lock(lost_mu_);
  lost_.reset();
  return Status::OK();
}

RocksStore::~RocksStore() {
  AbortIfPinned(this, path_);  // a Checkpointer's captures in flight would use it after free
  if (pool_) pool_->join();
  DbHandles h{txn_db_, db_, handles_};
  CloseRocks(&h);
}

Status RocksStore::Refresh() {
  if (!read_only_) return Status::OK();
  // Open the new view first: on failure the old one stays usable. The
  // commit log is read before it (see OpenReadOnlyInstance).
  auto log = CommitLog::Read(path_);
  DbHandles fresh;
  TRAINSNAP_RETURN_IF_ERROR(OpenRocks(path_, StoreOptions(), /*read_only=*/true, env_, &fresh));
  std::unique_lock<std::shared_mutex> lock(db_mu_);
  DbHandles old{txn_db_, db_, handles_};
  Adopt(fresh);
  lock.unlock();
  CloseRocks(&old);
  std::shared_lock<std::shared_mutex> view_lock(db_mu_);
  return CheckCommitLog(log.ok() ? *log : std::nullopt).WithContext("refresh " + path_);
}

Status RocksStore::AcquireView(std::shared_lock<std::shared_mutex>* lock) {
  *lock = std::shared_lock<std::shared_mutex>(db_mu_);
  if (db_ != nullptr) return Status::OK();
  // A failed recovery left no database (the fault was still there). Try
  // again now: reads must work as soon as the fault clears, not only after
  // the next write.
  lock->unlock();
  {
    std::lock_guard<std::mutex> recovering(resume_mu_);
    bool still_closed;
    {
      std::shared_lock<std::shared_mutex> check(db_mu_);
      still_closed = db_ == nullptr;
    }
    if (still_closed) static_cast<void>(ReopenLocked());
  }
  *lock = std::shared_lock<std::shared_mutex>(db_mu_);
  if (db_ == nullptr) {
    return Status(recovery_error_.code(), "store " + path_ + " has no open database after a failed recovery (" +
                                              recovery_error_.message() + ")");
  }
  return Status::OK();
}

void RocksStore::NoteBackgroundErrors() {
  std::shared_lock<std::shared_mutex> lock(db_mu_);
  if (db_ == nullptr || txn_db_ == nullptr) return;
  uint64_t count = 0;
  if (!db_->GetIntProperty(rocksdb::DB::Properties::kBackgroundErrors, &count)) return;
  uint64_t seen = background_errors_seen_.load();
  while (count > seen && !background_errors_seen_.compare_exchange_weak(seen, count)) {
  }
  if (count > seen) needs_resume_.store(true);
}

RocksStore::WriteMark RocksStore::MarkWrite() const {
  return WriteMark{background_errors_seen_.load(), generation_.load()};
}

bool RocksStore::FailedInBackground(const WriteMark& mark) {
  // A failed flush or compaction bumps RocksDB's count under the DB mutex
  // right after it sets the background error, so a write refused because of
  // that error finds the count already bumped.
  NoteBackgroundErrors();
  return generation_.load() != mark.generation || background_errors_seen_.load() > mark.background_errors;
}

Status RocksStore::PrepareWrite() {
  NoteBackgroundErrors();
  if (!needs_resume_.load()) return Status::OK();
  std::lock_guard<std::mutex> lock(resume_mu_);
  if (!needs_resume_.load()) return Status::OK();  // another thread recovered
  return ReopenLocked().WithContext("reopen after a failed write");
}

Status RocksStore::ReopenLocked() {
  // Not DB::Resume(). A manual Resume() marks recovery as in progress and
  // then waits for the background jobs to finish (ResumeImpl ->
  // WaitForBackgroundWork); while recovery is in progress RocksDB 7.8
  // reschedules a failed flush or compaction (MaybeScheduleFlushOrCompaction
  // only stops on a background error when no recovery runs), so under a
  // persistent fault the job fails, sleeps 1 s and runs again for ever, and
  // Resume() never returns. Close() instead marks the DB as shutting down:
  // nothing is rescheduled, and it waits at most for the job in flight.
  // Some errors (failing to create a WAL file on a full disk) are not
  // resumable anyway. What was written before the failure is recovered from
  // the WAL.
  std::unique_lock<std::shared_mutex> exclusive(db_mu_);
  DbHandles old{txn_db_, db_, handles_};
  CloseRocks(&old);
  Adopt(DbHandles());
  generation_.fetch_add(1);
  background_errors_seen_ = 0;  // a new instance counts from zero
  // Dedup answers must come from the reopened database.
  registry_.ForgetSizes();
  StoreOptions reopen = options_;
  reopen.create_if_missing = false;
  DbHandles fresh;
  Status s = OpenRocks(path_, reopen, /*read_only=*/false, env_, &fresh);
  if (s.ok()) {
    Adopt(fresh);
    needs_resume_ = false;
    recovery_error_ = Status::OK();
    return Status::OK();
  }
  // Opening for writing needs space (a new WAL, the recovered memtable's
  // table file). Until the next write retries, serve reads from a read-only
  // instance, which writes nothing; without one, the next read retries.
  needs_resume_ = true;
  recovery_error_ = s;
  DbHandles reader;
  if (OpenRocks(path_, reopen, /*read_only=*/true, env_, &reader).ok()) Adopt(reader);
  return s;
}

Status RocksStore::CheckWrite(const rocksdb::Status& s, std::string_view context) {
  // No mutex: callers hold db_mu_ shared, and PrepareWrite holds
  // resume_mu_ while it waits for db_mu_ exclusively.
  if (!s.ok() && !s.IsBusy() && !s.IsInvalidArgument()) needs_resume_.store(true);
  return FromRocks(s, context);
}

Status RocksStore::CheckWritable(std::string_view what) const {
  if (read_only_) return Status::NotSupported(std::string(what) + ": store " + path_ + " is open read-only");
  return Status::OK();
}

// --- disk space ------------------------------------------------------------------

void RocksStore::RestoreReserve() {
  if (read_only_ || options_.reserve_bytes == 0) return;
  const fs::path file = fs::path(path_) / kReserveFile;
  std::error_code ec;
  if (fs::exists(file, ec)) {
    reserve_present_ = true;
    return;
  }
  // Only with room to spare: the space a caller just freed goes to the next
  // snapshot first.
  const std::optional<uint64_t> free = FreeBytes(path_);
  if (!free || *free < 2 * options_.reserve_bytes) return;
  // Written under a temporary name and renamed: a crash never leaves a short
  // reserve file that looks complete.
  const std::string tmp = file.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  bool ok = ::posix_fallocate(fd, 0, static_cast<off_t>(options_.reserve_bytes)) == 0 && ::fsync(fd) == 0;
  ok = ::close(fd) == 0 && ok;
  if (ok) ok = ::rename(tmp.c_str(), file.c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  reserve_present_ = ok;
}

bool RocksStore::ReleaseReserve() {
  if (read_only_ || !reserve_present_) return false;
  reserve_present_ = false;
  std::error_code ec;
  return fs::remove(fs::path(path_) / kReserveFile, ec);
}

void RocksStore::UseReserveIfFull() {
  if (!reserve_present_) return;
  const std::optional<uint64_t> free = FreeBytes(path_);
  if (free && *free >= options_.reserve_bytes) return;
  ReleaseReserve();
}

Status RocksStore::ReclaimSpace() {
  // Flushing drops deleted values that are still in a memtable (they are
  // never written to a blob file) and lets the WAL files that hold them go.
  rocksdb::FlushOptions flush;
  flush.allow_write_stall = true;
  TRAINSNAP_RETURN_IF_ERROR(CheckWrite(db_->Flush(flush, handles_), "flush"));
  // Compacting the chunks' keys drops the references of deleted values:
  // RocksDB counts them as garbage of their blob files and deletes a blob
  // file once all of it is garbage. Only the keys are rewritten (small).
  rocksdb::CompactRangeOptions compact;
  compact.blob_garbage_collection_policy = rocksdb::BlobGarbageCollectionPolicy::kDisable;
  compact.allow_write_stall = true;
  TRAINSNAP_RETURN_IF_ERROR(CheckWrite(db_->CompactRange(compact, chunks_cf_, nullptr, nullptr), "compact chunks"));
  // The blob files that still hold live values keep their garbage until the
  // live values are relocated (rewritten). Done once the garbage exceeds
  // kMaxGarbageRatio of the live values, oldest files first, as many as the
  // free space allows.
  rocksdb::ColumnFamilyMetaData meta;
  db_->GetColumnFamilyMetaData(chunks_cf_, &meta);
  std::vector<const rocksdb::BlobMetaData*> files;
  uint64_t live = 0, garbage = 0;
  for (const rocksdb::BlobMetaData& b : meta.blob_files) {
    files.push_back(&b);
    live += b.total_blob_bytes - b.garbage_blob_bytes;
    garbage += b.garbage_blob_bytes;
  }
  live_blob_bytes_ = live;
  deleted_since_reclaim_ = 0;
  if (garbage == 0 || static_cast<double>(garbage) <= kMaxGarbageRatio * static_cast<double>(live)) {
    return Status::OK();
  }
  std::sort(files.begin(), files.end(), [](const rocksdb::BlobMetaData* a, const rocksdb::BlobMetaData* b) {
    return a->blob_file_number < b->blob_file_number;
  });
  // RocksDB relocates from the oldest floor(cutoff * files) blob files.
  const std::optional<uint64_t> free = FreeBytes(path_);
  uint64_t budget = free ? *free : 0;
  size_t oldest = 0;
  for (; oldest < files.size(); ++oldest) {
    const uint64_t relocated = files[oldest]->total_blob_bytes - files[oldest]->garbage_blob_bytes;
    if (relocated > budget) break;
    budget -= relocated;
  }
  if (oldest == 0) return Status::OK();
  compact.blob_garbage_collection_policy = rocksdb::BlobGarbageCollectionPolicy::kForce;
  compact.blob_garbage_collection_age_cutoff =
      oldest == files.size() ? 1.0 : (static_cast<double>(oldest) + 0.5) / static_cast<double>(files.size());
  // Relocation happens where a compaction reads the keys: also those
  // already in the last level.
  compact.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  TRAINSNAP_RETURN_IF_ERROR(CheckWrite(db_->CompactRange(compact, chunks_cf_, nullptr, nullptr), "relocate blobs"));
  db_->GetColumnFamilyMetaData(chunks_cf_, &meta);
  live = 0;
  for (const rocksdb::BlobMetaData& b : meta.blob_files) live += b.total_blob_bytes - b.garbage_blob_bytes;
  live_blob_bytes_ = live;
  return Status::OK();
}

Status RocksStore::GiveSpaceBack(std::shared_lock<std::shared_mutex>* view_lock) {
  Status s = ReclaimSpace();
  if (s.code() == StatusCode::kNoSpace) {
    // The failed flush or compaction stopped the database's writes: reopen
    // and try once more, with the reserve's space when one is left. Without
    // one the second try still gets what the reopen frees: closing waits for
    // RocksDB's background jobs and opening purges the files they left
    // obsolete (the first try failed now and then under load, when the
    // files freed by the previous delete were not yet gone).
    ReleaseReserve();
    view_lock->unlock();
    s = PrepareWrite();
    if (s.ok()) s = AcquireView(view_lock);
    if (s.ok() && txn_db_ == nullptr) s = recovery_error_;
    if (s.ok()) s = ReclaimSpace();
  }
  RestoreReserve();
  return s.WithContext("give space back");
}

// --- reading -------------------------------------------------------------------

Result<std::optional<SnapshotRecordData>> RocksStore::ReadSnapshotRecord(int64_t step) {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), snapshots_cf_, EncodeStepKey(step), &value);
  if (s.IsNotFound()) return std::optional<SnapshotRecordData>();
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "read snapshot record"));
  TRAINSNAP_ASSIGN_OR_RETURN(SnapshotRecordData data, ParseSnapshotRecord(value, step));
  return std::optional<SnapshotRecordData>(std::move(data));
}

Result<std::vector<int64_t>> RocksStore::ListSteps(const rocksdb::Snapshot* at, bool check_counts) {
  std::optional<rocksdb::ManagedSnapshot> own;
  if (at == nullptr) at = own.emplace(db_).snapshot();
  rocksdb::ReadOptions ro;
  ro.snapshot = at;
  std::vector<int64_t> steps;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, snapshots_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    TRAINSNAP_ASSIGN_OR_RETURN(int64_t step, DecodeStepKey(std::string_view(it->key().data(), it->key().size())));
    steps.push_back(step);
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "list snapshots"));
  if (check_counts) {
    std::optional<int64_t> newest;
    if (!steps.empty()) newest = steps.back();
    TRAINSNAP_RETURN_IF_ERROR(CheckListed(at, steps.size(), newest).WithContext("list snapshots"));
  }
  return steps;
}

Result<std::vector<SnapshotInfo>> RocksStore::List() {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  return ListLocked();
}

Result<std::vector<SnapshotInfo>> RocksStore::ListLocked(const rocksdb::Snapshot* at) {
  // The count is read at the same RocksDB snapshot as the records: a
  // table-file read that made the scan skip records without an error
  // (docs/reliability.md) is Corruption, not a shorter list.
  std::optional<rocksdb::ManagedSnapshot> own;
  if (at == nullptr) at = own.emplace(db_).snapshot();
  std::vector<SnapshotInfo> out;
  rocksdb::ReadOptions options;
  options.snapshot = at;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options, snapshots_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto step = DecodeStepKey(std::string_view(it->key().data(), it->key().size()));
    if (!step.ok()) return step.status().WithContext("list snapshots");
    auto data = ParseSnapshotRecord(std::string_view(it->value().data(), it->value().size()), *step);
    if (!data.ok()) return data.status().WithContext("list snapshots: " + StepName(*step));
    out.push_back(data->info);
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "list snapshots"));
  std::optional<int64_t> newest;
  if (!out.empty()) newest = out.back().step;
  TRAINSNAP_RETURN_IF_ERROR(CheckListed(at, out.size(), newest).WithContext("list snapshots"));
  return out;
}

Result<std::optional<int64_t>> RocksStore::Latest() {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  rocksdb::ManagedSnapshot at(db_);
  rocksdb::ReadOptions ro;
  ro.snapshot = at.snapshot();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, snapshots_cf_));
  it->SeekToLast();
  std::optional<int64_t> latest;
  if (it->Valid()) {
    auto step = DecodeStepKey(std::string_view(it->key().data(), it->key().size()));
    if (!step.ok()) return step.status().WithContext("latest snapshot");
    latest = *step;
  } else {
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "latest snapshot"));
  }
  TRAINSNAP_RETURN_IF_ERROR(CheckListed(at.snapshot(), std::nullopt, latest).WithContext("latest snapshot"));
  return latest;
}

Result<SnapshotInfo> RocksStore::Info(int64_t step) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  auto data = ReadSnapshotRecord(step);
  if (!data.ok()) return data.status().WithContext(StepName(step));
  if (!data->has_value()) return Status::NotFound("no snapshot at " + StepName(step));
  return (*data)->info;
}

Result<std::string> RocksStore::Manifest(int64_t step) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  auto data = ReadSnapshotRecord(step);
  if (!data.ok()) return data.status().WithContext(StepName(step));
  if (!data->has_value()) return Status::NotFound("no snapshot at " + StepName(step));
  return std::move((*data)->manifest);
}

Result<std::vector<TensorRecord>> RocksStore::Tensors(int64_t step) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  // Read the snapshot record and its tensors from one consistent view.
  const rocksdb::Snapshot* view = db_->GetSnapshot();
  std::unique_ptr<const rocksdb::Snapshot, std::function<void(const rocksdb::Snapshot*)>> release(
      view, [this](const rocksdb::Snapshot* v) { db_->ReleaseSnapshot(v); });
  rocksdb::ReadOptions ro;
  ro.snapshot = view;
  std::string value;
  rocksdb::Status s = db_->Get(ro, snapshots_cf_, EncodeStepKey(step), &value);
  if (s.IsNotFound()) return Status::NotFound("no snapshot at " + StepName(step));
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, StepName(step) + ": read snapshot record"));
  auto data = ParseSnapshotRecord(value, step);
  if (!data.ok()) return data.status().WithContext(StepName(step));
  return SnapshotTensors(*data, ro);
}

Result<std::vector<TensorRecord>> RocksStore::ReadRecordGroup(const RecordGroupRef& group,
                                                              const rocksdb::ReadOptions& ro) {
  const std::string where = "record group " + group.chunk.hash.Hex();
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db_->Get(ro, chunks_cf_, EncodeChunkKey(group.chunk.hash), &value);
  if (s.IsNotFound()) return Status::Corruption(where + ": referenced but missing from the store");
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, where));
  std::string raw(group.chunk.raw_bytes, '\0');
  TRAINSNAP_RETURN_IF_ERROR(
      ReadChunkInto(group.chunk, std::string_view(value.data(), value.size()), reinterpret_cast<uint8_t*>(raw.data()))
          .WithContext(where));
  return ParseRecordGroup(raw, group);
}

Result<std::vector<TensorRecord>> RocksStore::SnapshotTensors(const SnapshotRecordData& data,
                                                              const rocksdb::ReadOptions& base_ro) {
  const int64_t step = data.info.step;
  std::vector<TensorRecord> out;
  if (data.grouped) {
    out.reserve(data.info.tensors);
    for (const RecordGroupRef& group : data.groups) {
      auto records = ReadRecordGroup(group, base_ro);
      if (!records.ok()) return records.status().WithContext(StepName(step));
      for (TensorRecord& r : *records) out.push_back(std::move(r));
    }
    return out;
  }
  rocksdb::ReadOptions ro = base_ro;
  const std::string prefix = TensorKeyPrefix(step);
  const std::string upper = PrefixUpperBound(prefix);
  rocksdb::Slice upper_slice(upper);
  if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, tensors_cf_));
  for (it->Seek(prefix); it->Valid(); it->Next()) {
    auto key = DecodeTensorKey(std::string_view(it->key().data(), it->key().size()));
    if (!key.ok()) return key.status().WithContext(StepName(step));
    auto record = ParseTensorRecord(std::string_view(it->value().data(), it->value().size()), key->param_id,
                                    key->role);
    if (!record.ok()) {
      return record.status().WithContext(StepName(step) + ": tensor param_id " + ParamIdHex(key->param_id) +
                                         " role " + key->role);
    }
    out.push_back(std::move(*record));
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), StepName(step) + ": read tensor records"));
  return out;
}

Result<TensorRecord> RocksStore::Tensor(int64_t step, uint64_t param_id, std::string_view role) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  const std::string name = StepName(step) + ": tensor param_id " + ParamIdHex(param_id) + " role " +
                           std::string(role);
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(tensor_cache_mu_);
    generation = tensor_cache_generation_;
    if (tensor_cache_step_ == step) {
      auto found = tensor_cache_.find(std::make_pair(param_id, std::string(role)));
      if (found == tensor_cache_.end()) return Status::NotFound(name + ": not in the store");
      return found->second;
    }
  }
  rocksdb::ManagedSnapshot at(db_);
  rocksdb::ReadOptions ro;
  ro.snapshot = at.snapshot();
  std::string value;
  rocksdb::Status s = db_->Get(ro, snapshots_cf_, EncodeStepKey(step), &value);
  if (s.IsNotFound()) return Status::NotFound(name + ": not in the store");
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, name + ": read snapshot record"));
  auto data = ParseSnapshotRecord(value, step);
  if (!data.ok()) return data.status().WithContext(name);
  if (data->grouped) {
    auto records = SnapshotTensors(*data, ro);
    if (!records.ok()) return records.status().WithContext(name);
    std::map<std::pair<uint64_t, std::string>, TensorRecord> by_key;
    for (TensorRecord& r : *records) {
      auto key = std::make_pair(r.param_id, r.role);
      by_key.emplace(std::move(key), std::move(r));
    }
    auto found = by_key.find(std::make_pair(param_id, std::string(role)));
    std::optional<TensorRecord> out;
    if (found != by_key.end()) out = found->second;
    std::lock_guard<std::mutex> lock(tensor_cache_mu_);
    if (generation == tensor_cache_generation_) {
      tensor_cache_step_ = step;
      tensor_cache_ = std::move(by_key);
    }
    if (!out) return Status::NotFound(name + ": not in the store");
    return std::move(*out);
  }
  s = db_->Get(ro, tensors_cf_, EncodeTensorKey(step, param_id, role), &value);
  if (s.IsNotFound()) return Status::NotFound(name + ": not in the store");
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, name));
  auto record = ParseTensorRecord(value, param_id, std::string(role));
  if (!record.ok()) return record.status().WithContext(name);
  return record;
}

Status RocksStore::ReadChunkInto(const ChunkRef& ref, std::string_view value, uint8_t* dst,
                                 std::optional<std::string_view> base_value) {
  auto header = ParseChunkHeader(value);
  if (!header.ok()) return header.status().WithContext("chunk " + ref.hash.Hex());
  std::vector<uint8_t> base;
  if (header->filter == ChunkFilter::kXorDelta) {
    // The base is read and checked like any chunk; its chain is one shorter,
    // so the recursion ends (at most kMaxDeltaDepth levels).
    const std::string where = "delta chunk " + ref.hash.Hex() + " (depth " +
                              std::to_string(header->delta_depth) + "): base " + header->base.Hex();
    rocksdb::PinnableSlice read_value;
    if (!base_value) {
      rocksdb::Status s = db_->Get(ChunkReadOptions(), chunks_cf_, EncodeChunkKey(header->base), &read_value);
      if (s.IsNotFound()) return Status::Corruption(where + ": missing from the store");
      if (!s.ok()) return FromRocks(s, where);
      base_value = std::string_view(read_value.data(), read_value.size());
    }
    auto base_header = ParseChunkHeader(*base_value);
    if (!base_header.ok()) return base_header.status().WithContext(where);
    const uint8_t base_depth = base_header->filter == ChunkFilter::kXorDelta ? base_header->delta_depth : 0;
    if (base_depth + 1 != header->delta_depth) {
      return Status::Corruption(where + ": has chain depth " + std::to_string(base_depth) + ", expected " +
                                std::to_string(header->delta_depth - 1));
    }
    base.resize(ref.raw_bytes);
    ChunkRef base_ref;
    base_ref.hash = header->base;
    base_ref.raw_bytes = ref.raw_bytes;
    TRAINSNAP_RETURN_IF_ERROR(ReadChunkInto(base_ref, *base_value, base.data()).WithContext(where));
  }
  Status s = DecodeChunk(value, dst, ref.raw_bytes, base.empty() ? nullptr : base.data());
  if (!s.ok()) return s.WithContext("chunk " + ref.hash.Hex());
  if (!(HashChunk(dst, ref.raw_bytes) == ref.hash)) {
    return Status::Corruption("chunk " + ref.hash.Hex() + ": hash mismatch");
  }
  return Status::OK();
}

Status RocksStore::ReadTensor(const TensorRecord& record, void* dst, size_t dst_bytes) {
  TensorRead read;
  read.record = &record;
  read.dst = dst;
  read.dst_bytes = dst_bytes;
  return ReadTensors({read});
}

Status RocksStore::ReadTensors(const std::vector<TensorRead>& reads) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  std::vector<ChunkRead> chunks;
  for (size_t i = 0; i < reads.size(); ++i) {
    const TensorRead& r = reads[i];
    if (r.record == nullptr) return Status::InvalidArgument("read tensor " + std::to_string(i) + ": null record");
    const TensorRecord& record = *r.record;
    if (r.dst_bytes != record.bytes) {
      return Status::InvalidArgument(ReadName(r) + ": destination has " + std::to_string(r.dst_bytes) +
                                     " bytes, tensor has " + std::to_string(record.bytes));
    }
    uint64_t total = 0;
    for (const ChunkRef& c : record.chunks) total += c.raw_bytes;
    if (total != record.bytes) return Status::InvalidArgument(ReadName(r) + ": chunk lengths do not add up to its bytes");
    if (record.bytes > 0 && r.dst == nullptr) return Status::InvalidArgument(ReadName(r) + ": null destination");
    auto* out = static_cast<uint8_t*>(r.dst);
    uint64_t offset = 0;
    for (size_t c = 0; c < record.chunks.size(); offset += record.chunks[c].raw_bytes, ++c) {
      chunks.push_back({&record.chunks[c], out + offset, i, c});
    }
  }
  // Contiguous batches of at most kReadBatch chunks (which bounds the values
  // and delta bases pinned at once to 2 x kReadBatch chunks per thread), and
  // at least two per worker so that the threads finish together. Measured
  // (bench/README.md): batches of 1, 2, 4 or 8 restore equally fast from the
  // page cache; MultiGet saves lookups, not decode time.
  constexpr size_t kReadBatch = 4;
  const size_t tasks = 2 * static_cast<size_t>(threads_);
  const size_t batch = std::clamp<size_t>((chunks.size() + tasks - 1) / tasks, 1, kReadBatch);
  const size_t batches = (chunks.size() + batch - 1) / batch;
  std::vector<Status> errors(reads.size());
  std::mutex errors_mu;
  TRAINSNAP_RETURN_IF_ERROR(ParallelFor(*pool_, batches, [&](size_t b) {
    ReadChunkBatch(chunks, b * batch, std::min(chunks.size(), (b + 1) * batch), reads, &errors, &errors_mu);
    return Status::OK();
  }));
  for (const Status& error : errors) TRAINSNAP_RETURN_IF_ERROR(error);
  return Status::OK();
}

void RocksStore::ReadChunkBatch(const std::vector<ChunkRead>& chunks, size_t begin, size_t end,
                                const std::vector<TensorRead>& reads, std::vector<Status>* errors,
                                std::mutex* errors_mu) {
  auto fail = [&](const ChunkRead& c, Status status) {
    std::lock_guard<std::mutex> lock(*errors_mu);
    Status& slot = (*errors)[c.read];
    if (slot.ok()) slot = status.WithContext(ReadName(reads[c.read]) + ": chunk " + std::to_string(c.index));
  };
  const size_t n = end - begin;
  std::vector<std::string> keys(n);
  std::vector<rocksdb::Slice> key_slices(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = EncodeChunkKey(chunks[begin + i].ref->hash);
    key_slices[i] = keys[i];
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> statuses(n);
  db_->MultiGet(ChunkReadOptions(), chunks_cf_, n, key_slices.data(), values.data(), statuses.data());

  // The bases of the delta chunks, fetched together; a base that cannot be
  // read here is read again (and its error reported) by ReadChunkInto.
  std::vector<std::string> base_keys;
  std::vector<size_t> base_of(n, SIZE_MAX);
  for (size_t i = 0; i < n; ++i) {
    if (!statuses[i].ok()) continue;
    auto header = ParseChunkHeader(std::string_view(values[i].data(), values[i].size()));
    if (!header.ok() || header->filter != ChunkFilter::kXorDelta) continue;
    std::string key = EncodeChunkKey(header->base);
    auto same = std::find(base_keys.begin(), base_keys.end(), key);
    base_of[i] = static_cast<size_t>(same - base_keys.begin());
    if (same == base_keys.end()) base_keys.push_back(std::move(key));
  }
  std::vector<rocksdb::PinnableSlice> base_values(base_keys.size());
  std::vector<rocksdb::Status> base_statuses(base_keys.size());
  if (!base_keys.empty()) {
    std::vector<rocksdb::Slice> base_slices(base_keys.begin(), base_keys.end());
    db_->MultiGet(ChunkReadOptions(), chunks_cf_, base_keys.size(), base_slices.data(), base_values.data(),
                  base_statuses.data());
  }

  for (size_t i = 0; i < n; ++i) {
    const ChunkRead& c = chunks[begin + i];
    if (statuses[i].IsNotFound()) {
      fail(c, Status::Corruption(c.ref->hash.Hex() + ": referenced but missing from the store"));
      continue;
    }
    if (!statuses[i].ok()) {
      fail(c, FromRocks(statuses[i], c.ref->hash.Hex()));
      continue;
    }
    std::optional<std::string_view> base;
    if (base_of[i] != SIZE_MAX && base_statuses[base_of[i]].ok()) {
      base = std::string_view(base_values[base_of[i]].data(), base_values[base_of[i]].size());
    }
    Status s = ReadChunkInto(*c.ref, std::string_view(values[i].data(), values[i].size()), c.dst, base);
    if (!s.ok()) fail(c, std::move(s));
  }
}

// --- writing -------------------------------------------------------------------

Result<std::unique_ptr<SnapshotWriter>> RocksStore::BeginSnapshot(int64_t step, const SnapshotOptions& options) {
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable("begin snapshot " + StepName(step)));
  return std::unique_ptr<SnapshotWriter>(new SnapshotWriterImpl(this, step, options));
}

Result<std::optional<uint64_t>> RocksStore::LookupChunk(const ChunkHash& hash) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), chunks_cf_, EncodeChunkKey(hash), &value);
  if (s.IsNotFound()) return std::optional<uint64_t>();
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "look up chunk " + hash.Hex()));
  registry_.NoteStored(hash, value.size());
  return std::optional<uint64_t>(value.size());
}

Status RocksStore::PutChunk(const ChunkHash& hash, const std::string& encoded, const ChunkHash* base) {
  const std::string context = (base ? "write delta chunk " : "write chunk ") + hash.Hex();
  // A chunk write is idempotent (content-addressed): when a background job
  // failed under it, it is retried once after recovery.
  for (int attempt = 0;; ++attempt) {
    TRAINSNAP_RETURN_IF_ERROR(PrepareWrite());
    const WriteMark mark = MarkWrite();
    rocksdb::Status s;
    {
      std::shared_lock<std::shared_mutex> view_lock;
      TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
      // Another thread's recovery may have failed since PrepareWrite.
      if (txn_db_ == nullptr) return recovery_error_.WithContext(context + ": store reopened read-only");
      rocksdb::WriteOptions wo;  // WAL on, not synced: the commit's synced write covers it
      rocksdb::WriteBatch batch;
      if (base != nullptr) {
        if (chunk_deps_cf_ == nullptr) return Status::Aborted(context + ": no chunk_deps CF");
        // The dependency first in the same batch: GC never sees the delta without it.
        TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Put(chunk_deps_cf_, EncodeChunkKey(hash), EncodeChunkKey(*base)),
                                            "write chunk dependency"));
      }
      TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Put(chunks_cf_, EncodeChunkKey(hash), encoded), "write chunk"));
      s = db_->Write(wo, &batch);
    }
    Status result = CheckWrite(s, context);
    if (result.ok() || attempt > 0 || !FailedInBackground(mark)) return result;
  }
}

Result<SnapshotInfo> RocksStore::CommitSnapshot(SnapshotInfo info, const std::vector<TensorRecord>& records,
                                                const std::vector<RecordGroupRef>* groups,
                                                const std::string& manifest, bool replace_existing,
                                                uint64_t* metadata_bytes) {
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable("commit"));
  std::lock_guard<std::mutex> lock(commit_mu_);
  TRAINSNAP_RETURN_IF_ERROR(PrepareWrite());
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  if (txn_db_ == nullptr) return recovery_error_.WithContext("store reopened read-only after a failed write");
  // One atomic WriteBatch through the OptimisticTransactionDB. Not an
  // OptimisticTransaction: commits are serialized by commit_mu_ in the only
  // writer process, so there is nothing to validate, and its validation
  // fails spuriously (TryAgain) when a memtable flush (e.g. forced by the
  // WAL bound) happens between the transaction's begin and its commit.
  rocksdb::WriteOptions wo;
  wo.sync = sync_;
  rocksdb::WriteBatch batch;
  const std::string step_key = EncodeStepKey(info.step);
  TRAINSNAP_RETURN_IF_ERROR(CheckRetentionKeeps(info.step));
  std::string existing;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), snapshots_cf_, step_key, &existing);
  if (s.ok()) {
    if (!replace_existing) return Status::AlreadyExists(StepName(info.step) + " is already stored");
    // Replacing: the old tensor records (format version 1) go in the same
    // transaction; the old record groups become garbage unless shared.
    const std::string prefix = TensorKeyPrefix(info.step);
    const std::string upper = PrefixUpperBound(prefix);
    rocksdb::Slice upper_slice(upper);
    rocksdb::ReadOptions ro;
    if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, tensors_cf_));
    for (it->Seek(prefix); it->Valid(); it->Next()) {
      TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Delete(tensors_cf_, it->key()), "delete old tensor record"));
    }
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan old tensor records"));
  } else if (!s.IsNotFound()) {
    return FromRocks(s, "read snapshot record");
  }
  auto stored_counts = ReadCounts(nullptr);
  if (!stored_counts.ok()) return stored_counts.status().WithContext("commit");
  StoreCountsData counts = stored_counts->value_or(StoreCountsData());
  if (s.IsNotFound()) {
    ++counts.snapshots;
    counts.newest_step = counts.newest_step ? std::max(*counts.newest_step, info.step) : info.step;
  }
  ++counts.transactions;
  TRAINSNAP_RETURN_IF_ERROR(PutCounts(&batch, counts));
  uint64_t written = 0;  // metadata bytes of this snapshot's records
  if (groups == nullptr) {
    for (const TensorRecord& r : records) {
      const std::string key = EncodeTensorKey(info.step, r.param_id, r.role);
      const std::string value = SerializeTensorRecord(r);
      written += key.size() + value.size();
      TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Put(tensors_cf_, key, value), "write tensor record"));
    }
  }
  bool to_grouped_version = false;
  if (groups != nullptr && format_version_ < kGroupedMetaFormatVersion) {
    // The first grouped snapshot: builds that cannot read it must refuse the
    // store from this commit on (same batch).
    std::string meta_value;
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(db_->Get(rocksdb::ReadOptions(), meta_cf_, kMetaStoreKey, &meta_value),
                                        "read meta record"));
    proto::StoreMeta meta;
    if (!meta.ParseFromString(meta_value)) return Status::Corruption("meta record does not parse");
    meta.set_format_version(kGroupedMetaFormatVersion);
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Put(meta_cf_, kMetaStoreKey, meta.SerializeAsString()), "meta"));
    to_grouped_version = true;
  }
  info.manifest_bytes = manifest.size();
  const std::string record = SerializeSnapshotRecord(info, manifest, groups);
  written += step_key.size() + record.size();
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Put(snapshots_cf_, step_key, record), "write snapshot record"));
  TRAINSNAP_KILL_POINT(kKillBeforeCommit);
  const WriteMark mark = MarkWrite();
  Status committed = CheckWrite(db_->Write(wo, &batch), "commit");
  if (!committed.ok() && FailedInBackground(mark)) {
    // A flush or compaction failed after PrepareWrite looked, and the
    // database refused this batch for it: recover and write the same batch
    // once more. Idempotent even if the first write reached the WAL after all.
    view_lock.unlock();
    TRAINSNAP_RETURN_IF_ERROR(PrepareWrite().WithContext("commit"));
    TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
    if (txn_db_ == nullptr) return recovery_error_.WithContext("store reopened read-only after a failed write");
    committed = CheckWrite(db_->Write(wo, &batch), "commit");
  }
  TRAINSNAP_RETURN_IF_ERROR(committed);
  ResetTensorCache();  // a replaced step's records changed
  if (to_grouped_version) format_version_ = kGroupedMetaFormatVersion;
  *metadata_bytes = written;
  // Committed: a failure to record it in the commit log is reported, but the
  // snapshot stays (like a commit whose WAL sync failed after the append).
  TRAINSNAP_RETURN_IF_ERROR(NoteTransaction(counts).WithContext("commit " + StepName(info.step)));
  TRAINSNAP_KILL_POINT(kKillAfterCommit);

  // The snapshot is committed whatever happens below: a failed prune, flush
  // or reclaim is retried after a later commit, and must not report the
  // commit failed.
  bool flushed = false;
  // Retention collects garbage: not while a loss is unacknowledged.
  if (retention_.keep_last > 0 && !lost_commits()) {
    auto pruned = PruneLocked(retention_, /*full_gc=*/false, info.step);
    if (pruned.ok()) deleted_since_reclaim_ += pruned->gc.bytes_deleted;
    // Bounded garbage: the blob files stay within 1 + kMaxGarbageRatio of
    // the live values, plus what was deleted since the last reclaim.
    if (deleted_since_reclaim_ > 0 &&
        static_cast<double>(deleted_since_reclaim_) >= kMaxGarbageRatio * static_cast<double>(live_blob_bytes_)) {
      static_cast<void>(ReclaimSpace());
      flushed = true;
    }
  }
  const int max_commits =
      options_.max_unflushed_commits > 0 ? options_.max_unflushed_commits : kDefaultMaxUnflushedCommits;
  if (flushed) {
    commits_since_flush_ = 0;
  } else if (++commits_since_flush_ >= max_commits) {
    // Bounds the commits that live only in the WAL; in the background, so
    // the commit does not wait for it.
    commits_since_flush_ = 0;
    rocksdb::FlushOptions flush;
    flush.wait = false;
    flush.allow_write_stall = true;
    static_cast<void>(CheckWrite(db_->Flush(flush, handles_), "flush"));
  }
  if (!reserve_present_) RestoreReserve();
  return info;
}

// --- deleting and garbage collection ------------------------------------------

Status RocksStore::DeleteSteps(const std::vector<int64_t>& steps, std::vector<ChunkRef>* released) {
  rocksdb::WriteBatch batch;
  TRAINSNAP_ASSIGN_OR_RETURN(std::optional<StoreCountsData> stored_counts, ReadCounts(nullptr));
  StoreCountsData counts = stored_counts.value_or(StoreCountsData());
  std::set<int64_t> gone;  // the steps of `steps` that are stored (each once)
  for (int64_t step : steps) {
    if (gone.count(step)) continue;
    std::string value;
    rocksdb::Status found = db_->Get(rocksdb::ReadOptions(), snapshots_cf_, EncodeStepKey(step), &value);
    if (found.ok()) {
      gone.insert(step);
      // Only a hint for the incremental GC after retention, like the tensor
      // records below: a record or group that does not read releases nothing.
      auto data = ParseSnapshotRecord(value, step);
      if (released && data.ok() && data->grouped) {
        for (const RecordGroupRef& group : data->groups) {
          released->push_back(group.chunk);
          auto records = ReadRecordGroup(group, rocksdb::ReadOptions());
          if (!records.ok()) continue;
          for (const TensorRecord& r : *records) released->insert(released->end(), r.chunks.begin(), r.chunks.end());
        }
      }
    } else if (!found.IsNotFound()) {
      return FromRocks(found, "read snapshot record of " + StepName(step));
    }
  }
  if (gone.size() > counts.snapshots) {
    return Status::Corruption("the store records " + std::to_string(counts.snapshots) + " snapshots, fewer than the " +
                              std::to_string(gone.size()) + " to delete (run `trainsnap verify`)");
  }
  counts.snapshots -= gone.size();
  if (counts.newest_step && gone.count(*counts.newest_step)) {
    // The newest remaining step: the first stored key below, skipping the deleted.
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), snapshots_cf_));
    std::optional<int64_t> newest;
    for (it->SeekForPrev(EncodeStepKey(*counts.newest_step)); it->Valid(); it->Prev()) {
      TRAINSNAP_ASSIGN_OR_RETURN(int64_t step, DecodeStepKey(std::string_view(it->key().data(), it->key().size())));
      if (!gone.count(step)) {
        newest = step;
        break;
      }
    }
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "find the newest remaining snapshot"));
    counts.newest_step = newest;
  }
  if (counts.snapshots == 0) counts.newest_step.reset();
  if (counts.snapshots > 0 && !counts.newest_step) {
    return Status::Corruption("the store records " + std::to_string(counts.snapshots) +
                              " snapshots but none remains after the delete (run `trainsnap verify`)");
  }
  ++counts.transactions;
  TRAINSNAP_RETURN_IF_ERROR(PutCounts(&batch, counts));
  for (int64_t step : steps) {
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Delete(snapshots_cf_, EncodeStepKey(step)), "delete"));
    const std::string prefix = TensorKeyPrefix(step);
    const std::string upper = PrefixUpperBound(prefix);
    rocksdb::Slice upper_slice(upper);
    rocksdb::ReadOptions ro;
    if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, tensors_cf_));
    for (it->Seek(prefix); it->Valid(); it->Next()) {
      if (released) {
        // Only a hint for the incremental GC after retention: a record that
        // does not parse just releases nothing (a full GC still finds them).
        auto record = ParseTensorRecord(std::string_view(it->value().data(), it->value().size()), 0, "");
        if (record.ok()) released->insert(released->end(), record->chunks.begin(), record->chunks.end());
      }
      TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Delete(tensors_cf_, it->key()), "delete"));
    }
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan tensor records of " + StepName(step)));
  }
  rocksdb::WriteOptions wo;
  wo.sync = sync_;
  TRAINSNAP_RETURN_IF_ERROR(CheckWrite(db_->Write(wo, &batch), "delete snapshots"));
  ResetTensorCache();
  return NoteTransaction(counts);
}

Status RocksStore::CheckStored(int64_t step) {
  auto data = ReadSnapshotRecord(step);
  if (!data.ok()) return data.status();
  if (!data->has_value()) return Status::NotFound("no such snapshot");
  return Status::OK();
}

Status RocksStore::Delete(int64_t step) {
  const std::string context = "delete " + StepName(step);
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable(context));
  std::lock_guard<std::mutex> lock(commit_mu_);
  UseReserveIfFull();
  auto attempt = [&]() -> Status {
    TRAINSNAP_RETURN_IF_ERROR(PrepareWrite().WithContext(context));
    std::shared_lock<std::shared_mutex> view_lock;
    TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
    TRAINSNAP_RETURN_IF_ERROR(CheckStored(step).WithContext(context));
    return DeleteSteps({step}, nullptr).WithContext(context);
  };
  // A failed delete changed nothing: with the reserve's space, try again.
  Status s = attempt();
  if (s.code() == StatusCode::kNoSpace && ReleaseReserve()) s = attempt();
  return s;
}

Status RocksStore::Rollback(int64_t step) {
  const std::string context = "rollback to " + StepName(step);
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable(context));
  std::lock_guard<std::mutex> lock(commit_mu_);
  UseReserveIfFull();
  auto attempt = [&]() -> Status {
    TRAINSNAP_RETURN_IF_ERROR(PrepareWrite().WithContext(context));
    std::shared_lock<std::shared_mutex> view_lock;
    TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
    TRAINSNAP_RETURN_IF_ERROR(CheckStored(step).WithContext(context));
    auto steps = ListSteps();
    if (!steps.ok()) return steps.status().WithContext(context);
    std::vector<int64_t> later;
    for (int64_t s : *steps) {
      if (s > step) later.push_back(s);
    }
    if (later.empty()) return Status::OK();
    return DeleteSteps(later, nullptr).WithContext(context);
  };
  // A failed rollback changed nothing: with the reserve's space, try again.
  Status s = attempt();
  if (s.code() == StatusCode::kNoSpace && ReleaseReserve()) s = attempt();
  return s;
}

Status RocksStore::CollectLiveChunks(std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher>* live,
                                     const std::set<int64_t>& excluded) {
  // The tensor records and the snapshot records are read at one RocksDB
  // snapshot, and the records found per step must match each snapshot's
  // tensor count. RocksDB 7.8 was seen to end a scan early without an error
  // when a table-file read returns flipped bits
  // (CorruptionTest.GcUnderReadFlipsNeverDeletesALiveChunk,
  // docs/reliability.md): every chunk of a skipped record would look like
  // garbage. A mismatch refuses the collection.
  rocksdb::ManagedSnapshot at(db_);  // released at scope exit
  rocksdb::ReadOptions options;
  options.snapshot = at.snapshot();
  std::map<int64_t, uint64_t> records_per_step;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options, tensors_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto key = DecodeTensorKey(std::string_view(it->key().data(), it->key().size()));
    if (!key.ok()) return key.status();
    // A record that does not parse might reference any chunk: refuse to guess.
    auto record = ParseTensorRecord(std::string_view(it->value().data(), it->value().size()), key->param_id,
                                    key->role);
    if (!record.ok()) {
      return record.status().WithContext(StepName(key->step) + ": tensor param_id " +
                                         ParamIdHex(key->param_id) + " role " + key->role);
    }
    ++records_per_step[key->step];
    if (excluded.count(key->step) > 0) continue;
    for (const ChunkRef& c : record->chunks) live->emplace(c.hash, c.stored_bytes);
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan tensor records"));
  const std::string refuse = "scan of live chunks: refusing to collect garbage (run `trainsnap verify`): ";
  // Snapshot records of format version 2: every record-group chunk they
  // list is live, and so is every chunk its records reference. A group
  // that does not read might reference anything: refuse. Groups shared by
  // several snapshots are read once.
  std::unordered_map<ChunkHash, std::vector<ChunkRef>, ChunkHashHasher> group_chunks;
  std::unique_ptr<rocksdb::Iterator> sit(db_->NewIterator(options, snapshots_cf_));
  for (sit->SeekToFirst(); sit->Valid(); sit->Next()) {
    TRAINSNAP_ASSIGN_OR_RETURN(int64_t step, DecodeStepKey(std::string_view(sit->key().data(), sit->key().size())));
    auto data = ParseSnapshotRecord(std::string_view(sit->value().data(), sit->value().size()), step);
    if (!data.ok()) return data.status().WithContext(refuse + StepName(step));
    if (!data->grouped) continue;
    uint64_t& seen = records_per_step[step];
    for (const RecordGroupRef& group : data->groups) {
      auto known = group_chunks.find(group.chunk.hash);
      if (known == group_chunks.end()) {
        auto records = ReadRecordGroup(group, options);
        if (!records.ok()) return records.status().WithContext(refuse + StepName(step));
        std::vector<ChunkRef> refs;
        for (const TensorRecord& r : *records) refs.insert(refs.end(), r.chunks.begin(), r.chunks.end());
        known = group_chunks.emplace(group.chunk.hash, std::move(refs)).first;
      }
      seen += group.records;  // ParseRecordGroup checked the count
      if (excluded.count(step) > 0) continue;
      live->emplace(group.chunk.hash, group.chunk.stored_bytes);
      for (const ChunkRef& c : known->second) live->emplace(c.hash, c.stored_bytes);
    }
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(sit->status(), "scan snapshot records"));
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<SnapshotInfo> snapshots, ListLocked(at.snapshot()));
  for (const SnapshotInfo& info : snapshots) {
    auto found = records_per_step.find(info.step);
    const uint64_t seen = found == records_per_step.end() ? 0 : found->second;
    if (seen != info.tensors) {
      return Status::Corruption(refuse + StepName(info.step) + " has " + std::to_string(info.tensors) +
                                " tensors but " + std::to_string(seen) + " tensor records were read");
    }
    if (found != records_per_step.end()) records_per_step.erase(found);
  }
  if (!records_per_step.empty()) {
    return Status::Corruption(refuse + "tensor records of " + StepName(records_per_step.begin()->first) +
                              ", which has no snapshot record (`trainsnap verify --repair` deletes them)");
  }
  return AddDeltaBases(live);
}

Status RocksStore::ReadChunkDeps(std::unordered_map<ChunkHash, ChunkHash, ChunkHashHasher>* deps) {
  if (chunk_deps_cf_ == nullptr) return Status::OK();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), chunk_deps_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto hash = DecodeChunkKey(std::string_view(it->key().data(), it->key().size()));
    auto base = DecodeChunkKey(std::string_view(it->value().data(), it->value().size()));
    // A damaged entry might hide a needed base: refuse to collect.
    if (!hash.ok()) return hash.status().WithContext("chunk_deps key");
    if (!base.ok()) return base.status().WithContext("chunk_deps of " + hash->Hex());
    deps->emplace(*hash, *base);
  }
  return FromRocks(it->status(), "scan chunk_deps");
}

Status RocksStore::AddDeltaBases(std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher>* live) {
  std::unordered_map<ChunkHash, ChunkHash, ChunkHashHasher> deps;
  TRAINSNAP_RETURN_IF_ERROR(ReadChunkDeps(&deps));
  if (deps.empty()) return Status::OK();
  std::vector<ChunkHash> todo;
  for (const auto& [hash, size] : *live) todo.push_back(hash);
  while (!todo.empty()) {
    const ChunkHash h = todo.back();
    todo.pop_back();
    auto d = deps.find(h);
    if (d == deps.end()) continue;
    if (live->emplace(d->second, 0).second) todo.push_back(d->second);
  }
  return Status::OK();
}

Result<GcReport> RocksStore::EraseChunks(std::vector<ChunkHash> candidates, const std::vector<uint64_t>& sizes,
                                         GcReport report) {
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> size_of;
  for (size_t i = 0; i < candidates.size(); ++i) size_of[candidates[i]] = sizes[i];
  for (size_t begin = 0; begin < candidates.size(); begin += kGcBatch) {
    std::vector<ChunkHash> batch_hashes(candidates.begin() + begin,
                                        candidates.begin() + std::min(candidates.size(), begin + kGcBatch));
    Status s = registry_.EraseUnpinned(&batch_hashes, [&](const std::vector<ChunkHash>& hashes) {
      rocksdb::WriteBatch batch;
      for (const ChunkHash& h : hashes) {
        TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Delete(chunks_cf_, EncodeChunkKey(h)), "delete chunk"));
        if (chunk_deps_cf_ != nullptr) {
          TRAINSNAP_RETURN_IF_ERROR(
              FromRocks(batch.Delete(chunk_deps_cf_, EncodeChunkKey(h)), "delete chunk dependency"));
        }
      }
      return CheckWrite(db_->Write(rocksdb::WriteOptions(), &batch), "delete chunks");
    });
    TRAINSNAP_RETURN_IF_ERROR(s);
    TRAINSNAP_KILL_POINT(kKillGcMidway);
    for (const ChunkHash& h : batch_hashes) {
      report.chunks_deleted += 1;
      report.bytes_deleted += size_of[h];
    }
  }
  report.chunks_live = report.chunks_scanned - report.chunks_deleted;
  return report;
}

Result<GcReport> RocksStore::CollectGarbageLocked(const ProgressFn& progress) {
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> live;
  TRAINSNAP_RETURN_IF_ERROR(CollectLiveChunks(&live));
  uint64_t estimate = 0;
  db_->GetIntProperty(chunks_cf_, "rocksdb.estimate-num-keys", &estimate);
  GcReport report;
  std::vector<ChunkHash> candidates;
  std::vector<uint64_t> sizes;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), chunks_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    TRAINSNAP_ASSIGN_OR_RETURN(ChunkHash hash, DecodeChunkKey(std::string_view(it->key().data(), it->key().size())));
    ++report.chunks_scanned;
    if (progress) progress(report.chunks_scanned, std::max(estimate, report.chunks_scanned));
    if (live.count(hash)) continue;
    candidates.push_back(hash);
    sizes.push_back(it->value().size());
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan chunks"));
  return EraseChunks(std::move(candidates), sizes, report);
}

Result<GcReport> RocksStore::CollectGarbage(const ProgressFn& progress) {
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable("collect garbage"));
  TRAINSNAP_RETURN_IF_ERROR(CheckNoLostCommits("collect garbage in " + path_));
  std::lock_guard<std::mutex> lock(commit_mu_);
  UseReserveIfFull();
  std::shared_lock<std::shared_mutex> view_lock;
  auto attempt = [&]() -> Result<GcReport> {
    TRAINSNAP_RETURN_IF_ERROR(PrepareWrite().WithContext("collect garbage"));
    TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
    return CollectGarbageLocked(progress);
  };
  // What a failed collection deleted was garbage: collecting again is safe.
  auto report = attempt();
  if (!report.ok() && report.status().code() == StatusCode::kNoSpace && ReleaseReserve()) {
    if (view_lock.owns_lock()) view_lock.unlock();
    report = attempt();
  }
  if (report.ok()) {
    Status s = GiveSpaceBack(&view_lock);
    if (!s.ok()) report = s;
  }
  if (!report.ok()) return report.status().WithContext("collect garbage in " + path_);
  return report;
}

Result<GcPlan> RocksStore::PlanCollection(const std::vector<int64_t>& steps, const ProgressFn& progress) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  const std::string context = "plan collection in " + path_;
  const std::set<int64_t> excluded(steps.begin(), steps.end());
  for (int64_t step : excluded) TRAINSNAP_RETURN_IF_ERROR(CheckStored(step).WithContext(context + ": " + StepName(step)));
  // Two scans with CollectGarbageLocked's rule: what every snapshot needs
  // now, and what the snapshots left after the deletion need.
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> needed_now;
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> needed_after;
  TRAINSNAP_RETURN_IF_ERROR(CollectLiveChunks(&needed_now).WithContext(context));
  TRAINSNAP_RETURN_IF_ERROR(CollectLiveChunks(&needed_after, excluded).WithContext(context));
  uint64_t estimate = 0;
  db_->GetIntProperty(chunks_cf_, "rocksdb.estimate-num-keys", &estimate);
  GcPlan plan;
  uint64_t scanned = 0;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), chunks_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto hash = DecodeChunkKey(std::string_view(it->key().data(), it->key().size()));
    if (!hash.ok()) return hash.status().WithContext(context);
    ++scanned;
    if (progress) progress(scanned, std::max(estimate, scanned));
    if (needed_after.count(*hash) > 0) continue;
    // The size as the collection counts it: the stored value's length.
    const uint64_t size = it->value().size();
    if (needed_now.count(*hash) > 0) {
      ++plan.chunks_freed;
      plan.bytes_freed += size;
    } else {
      ++plan.chunks_unreferenced;
      plan.bytes_unreferenced += size;
    }
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), context + ": scan chunks"));
  return plan;
}

Status RocksStore::CheckRetentionKeeps(int64_t step) {
  if (retention_.keep_last <= 0) return Status::OK();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), snapshots_cf_));
  it->SeekToLast();
  if (!it->Valid()) return FromRocks(it->status(), "latest snapshot");
  TRAINSNAP_ASSIGN_OR_RETURN(int64_t latest,
                             DecodeStepKey(std::string_view(it->key().data(), it->key().size())));
  if (step >= latest) return Status::OK();
  // Retention keeps the highest steps, and Latest() is the highest step: a
  // snapshot committed below it would be pruned as soon as keep_last higher
  // ones exist, and would never be the one RestoreLatest returns. A run that
  // resumed from an older step must drop the abandoned later snapshots first.
  return Status::InvalidArgument("below the latest stored " + StepName(latest) +
                                 ": retention (keep_last = " + std::to_string(retention_.keep_last) +
                                 ") keeps the highest steps and RestoreLatest returns the highest; "
                                 "Rollback to the step the run resumed from first, or keep steps increasing");
}

Result<PruneReport> RocksStore::PruneLocked(const RetentionPolicy& policy, bool full_gc,
                                            std::optional<int64_t> committed) {
  PruneReport report;
  if (policy.keep_last <= 0) return report;  // keep_last = 0 keeps everything
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListSteps());
  const size_t keep_from = steps.size() > static_cast<size_t>(policy.keep_last)
                               ? steps.size() - static_cast<size_t>(policy.keep_last)
                               : 0;
  for (size_t i = 0; i < keep_from; ++i) {
    if (policy.keep_every > 0 && steps[i] % policy.keep_every == 0) continue;
    // A commit never deletes the snapshot it has just acknowledged.
    if (committed.has_value() && steps[i] == *committed) continue;
    report.deleted_steps.push_back(steps[i]);
  }
  std::vector<ChunkRef> released;
  if (!report.deleted_steps.empty()) {
    TRAINSNAP_RETURN_IF_ERROR(DeleteSteps(report.deleted_steps, full_gc ? nullptr : &released));
  }
  if (full_gc) {
    TRAINSNAP_ASSIGN_OR_RETURN(report.gc, CollectGarbageLocked({}));
    return report;
  }
  if (released.empty()) return report;
  // Incremental: only the chunks the deleted snapshots referenced can have
  // become garbage; a full scan of the chunks would read every blob.
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> live;
  TRAINSNAP_RETURN_IF_ERROR(CollectLiveChunks(&live));
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> dead;
  for (const ChunkRef& c : released) {
    if (!live.count(c.hash)) dead.emplace(c.hash, c.stored_bytes);
  }
  // The bases of dead delta chunks that nothing live needs are dead too.
  std::unordered_map<ChunkHash, ChunkHash, ChunkHashHasher> deps;
  TRAINSNAP_RETURN_IF_ERROR(ReadChunkDeps(&deps));
  std::vector<ChunkHash> todo;
  for (const auto& [hash, size] : dead) todo.push_back(hash);
  while (!todo.empty()) {
    auto d = deps.find(todo.back());
    todo.pop_back();
    if (d == deps.end() || live.count(d->second) || dead.count(d->second)) continue;
    rocksdb::PinnableSlice value;  // for its size; the caller holds the view
    rocksdb::Status gs = db_->Get(rocksdb::ReadOptions(), chunks_cf_, EncodeChunkKey(d->second), &value);
    if (gs.IsNotFound()) continue;
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(gs, "read delta base " + d->second.Hex()));
    dead.emplace(d->second, value.size());
    todo.push_back(d->second);
  }
  std::vector<ChunkHash> candidates;
  std::vector<uint64_t> sizes;
  for (const auto& [hash, size] : dead) {
    candidates.push_back(hash);
    sizes.push_back(size);
  }
  GcReport gc;
  gc.chunks_scanned = candidates.size();
  TRAINSNAP_ASSIGN_OR_RETURN(report.gc, EraseChunks(std::move(candidates), sizes, gc));
  return report;
}

Result<PruneReport> RocksStore::Prune(const RetentionPolicy& policy) {
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable("prune"));
  if (policy.keep_last < 0 || policy.keep_every < 0) {
    return Status::InvalidArgument("prune: retention counts must be >= 0");
  }
  TRAINSNAP_RETURN_IF_ERROR(CheckNoLostCommits("prune " + path_));
  std::lock_guard<std::mutex> lock(commit_mu_);
  UseReserveIfFull();
  TRAINSNAP_RETURN_IF_ERROR(PrepareWrite().WithContext("prune"));
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  auto report = PruneLocked(policy, /*full_gc=*/true);
  if (report.ok()) {
    Status s = GiveSpaceBack(&view_lock);
    if (!s.ok()) report = s;
  }
  if (!report.ok()) return report.status().WithContext("prune " + path_);
  return report;
}

// --- verification and statistics ------------------------------------------------

Result<VerifyReport> RocksStore::Verify(std::optional<int64_t> step, const ProgressFn& progress) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  const std::string context = "verify " + path_;
  std::vector<int64_t> steps;
  if (step) {
    auto data = ReadSnapshotRecord(*step);
    if (!data.ok() && data.status().code() != StatusCode::kCorruption &&
        data.status().code() != StatusCode::kNotSupported) {
      return data.status().WithContext(context);
    }
    if (data.ok() && !data->has_value()) return Status::NotFound(context + ": no snapshot at " + StepName(*step));
    steps.push_back(*step);
  }
  VerifyReport report;
  if (!step) {
    VerifyStore(&report);
    // Every snapshot record the scan finds is verified; a count that
    // disagrees with the scan is one of VerifyStore's problems.
    // A scan that fails is one more problem; the file checks above say where.
    auto all = ListSteps(nullptr, /*check_counts=*/false);
    if (all.ok()) {
      steps = std::move(*all);
    } else {
      VerifyProblem p;
      p.store = true;
      p.status = all.status();
      report.problems.push_back(std::move(p));
    }
  }
  for (size_t si = 0; si < steps.size(); ++si) {
    const int64_t s = steps[si];
    ++report.snapshots;
    if (progress) progress(si, steps.size());
    auto record = ReadSnapshotRecord(s);
    if (!record.ok()) {
      report.problems.push_back({s, 0, "", -1, {}, record.status().WithContext(StepName(s) + ": snapshot record"), false, {}});
      continue;
    }
    uint64_t tensors_seen = 0;
    // Reads, decodes and re-hashes every chunk of one tensor record.
    auto verify_tensor = [&](uint64_t param_id, const std::string& role, const TensorRecord& tensor) {
      const std::string where = StepName(s) + ": tensor param_id " + ParamIdHex(param_id) + " role " + role;
      // Chunks are read, decoded and re-hashed in parallel; problems are
      // reported in chunk order.
      const size_t n = tensor.chunks.size();
      std::vector<Status> chunk_status(n);
      std::atomic<uint64_t> good_bytes{0};
      static_cast<void>(ParallelFor(*pool_, n, [&](size_t ci) -> Status {
        const ChunkRef& ref = tensor.chunks[ci];
        const std::string chunk_where = where + ": chunk " + std::to_string(ci);
        rocksdb::PinnableSlice value;
        rocksdb::Status rs = db_->Get(rocksdb::ReadOptions(), chunks_cf_, EncodeChunkKey(ref.hash), &value);
        if (rs.IsNotFound()) {
          chunk_status[ci] =
              Status::NotFound(chunk_where + " " + ref.hash.Hex() + ": referenced but missing from the store");
        } else if (!rs.ok()) {
          chunk_status[ci] = FromRocks(rs, chunk_where + " " + ref.hash.Hex());
        } else {
          thread_local std::vector<uint8_t> buffer;
          buffer.resize(ref.raw_bytes);
          chunk_status[ci] =
              ReadChunkInto(ref, std::string_view(value.data(), value.size()), buffer.data()).WithContext(chunk_where);
          if (chunk_status[ci].ok()) good_bytes += ref.raw_bytes;
        }
        return Status::OK();
      }));
      report.chunks += n;
      report.bytes += good_bytes.load();
      for (size_t ci = 0; ci < n; ++ci) {
        if (!chunk_status[ci].ok()) {
          report.problems.push_back({s, param_id, role, static_cast<int64_t>(ci), tensor.chunks[ci].hash,
                                     std::move(chunk_status[ci]), false, {}});
        }
      }
    };
    if (record->has_value() && (*record)->grouped) {
      // Format version 2: the records come from record groups; a group that
      // does not read (missing, damaged, hash mismatch, malformed) is one
      // problem naming the group's chunk, and its records count as seen.
      const SnapshotRecordData& data = **record;
      for (const RecordGroupRef& group : data.groups) {
        tensors_seen += group.records;
        report.tensors += group.records;
        auto records = ReadRecordGroup(group, rocksdb::ReadOptions());
        if (!records.ok()) {
          report.problems.push_back(
              {s, 0, "", -1, group.chunk.hash, records.status().WithContext(StepName(s)), false, {}});
          continue;
        }
        for (const TensorRecord& tensor : *records) verify_tensor(tensor.param_id, tensor.role, tensor);
      }
      continue;
    }
    const std::string prefix = TensorKeyPrefix(s);
    const std::string upper = PrefixUpperBound(prefix);
    rocksdb::Slice upper_slice(upper);
    rocksdb::ReadOptions ro;
    if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, tensors_cf_));
    for (it->Seek(prefix); it->Valid(); it->Next()) {
      ++tensors_seen;
      ++report.tensors;
      auto key = DecodeTensorKey(std::string_view(it->key().data(), it->key().size()));
      if (!key.ok()) {
        report.problems.push_back({s, 0, "", -1, {}, key.status().WithContext(StepName(s)), false, {}});
        continue;
      }
      const std::string where = StepName(s) + ": tensor param_id " + ParamIdHex(key->param_id) + " role " +
                                key->role;
      auto tensor = ParseTensorRecord(std::string_view(it->value().data(), it->value().size()), key->param_id,
                                      key->role);
      if (!tensor.ok()) {
        report.problems.push_back({s, key->param_id, key->role, -1, {}, tensor.status().WithContext(where), false, {}});
        continue;
      }
      verify_tensor(key->param_id, key->role, *tensor);
    }
    if (!it->status().ok()) {
      report.problems.push_back({s, 0, "", -1, {}, FromRocks(it->status(), StepName(s) + ": scan tensor records"), false, {}});
    } else if (record->has_value() && (*record)->info.tensors != tensors_seen) {
      report.problems.push_back({s, 0, "", -1, {},
                                 Status::Corruption(StepName(s) + ": snapshot record lists " +
                                                    std::to_string((*record)->info.tensors) +
                                                    " tensors, the store holds " + std::to_string(tensors_seen)), false, {}});
    }
  }
  if (progress) progress(steps.size(), steps.size());
  return report;
}

void RocksStore::VerifyStore(VerifyReport* report) {
  auto problem = [&](std::string file, Status status) {
    VerifyProblem p;
    p.store = true;
    p.file = std::move(file);
    p.status = std::move(status);
    report->problems.push_back(std::move(p));
  };
  // RocksDB's block checksums of every table file, one file at a time, so
  // that each damaged file is named (DB::VerifyChecksum stops at the first).
  std::vector<rocksdb::LiveFileMetaData> tables;
  db_->GetLiveFilesMetaData(&tables);
  std::sort(tables.begin(), tables.end(),
            [](const rocksdb::LiveFileMetaData& a, const rocksdb::LiveFileMetaData& b) {
              return a.relative_filename < b.relative_filename;
            });
  rocksdb::Options table_options;
  if (env_ != nullptr) table_options.env = env_;
  for (const rocksdb::LiveFileMetaData& table : tables) {
    const std::string where = "table file " + table.relative_filename + " (column family " +
                              table.column_family_name + ")";
    rocksdb::SstFileReader reader(table_options);
    rocksdb::Status s = reader.Open(table.directory + "/" + table.relative_filename);
    if (s.ok()) s = reader.VerifyChecksum();
    if (!s.ok()) {
      Status mapped = FromRocks(s, where);
      // Any failure to read back a file the MANIFEST lists is damage.
      if (mapped.code() == StatusCode::kIOError) mapped = Status::Corruption(mapped.message());
      problem(table.relative_filename, std::move(mapped));
    }
  }
  // Blob files (chunk payloads): each must be there at the size the
  // MANIFEST records. Their records' checksums are checked by the reads of
  // every referenced chunk below.
  rocksdb::ColumnFamilyMetaData chunks_meta;
  db_->GetColumnFamilyMetaData(chunks_cf_, &chunks_meta);
  for (const rocksdb::BlobMetaData& blob : chunks_meta.blob_files) {
    const std::string file = blob.blob_file_path + "/" + blob.blob_file_name;
    std::error_code ec;
    const uintmax_t size = fs::file_size(file, ec);
    if (ec) {
      problem(blob.blob_file_name, Status::Corruption("blob file " + blob.blob_file_name + ": " + ec.message() +
                                                      " (a file of the store is missing)"));
    } else if (size != blob.blob_file_size) {
      problem(blob.blob_file_name, Status::Corruption("blob file " + blob.blob_file_name + " has " +
                                                      std::to_string(size) + " bytes, the MANIFEST records " +
                                                      std::to_string(blob.blob_file_size)));
    }
  }
  // Every column family the store relies on, read at one snapshot.
  rocksdb::ManagedSnapshot at(db_);
  rocksdb::ReadOptions ro;
  ro.snapshot = at.snapshot();
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, meta_cf_));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
    }
    if (!it->status().ok()) problem("", FromRocks(it->status(), "scan the meta column family"));
  }
  auto counts = ReadCounts(at.snapshot());
  if (!counts.ok()) problem("", counts.status());
  auto steps = ListSteps(at.snapshot(), /*check_counts=*/counts.ok());
  if (!steps.ok()) problem("", steps.status());
  std::map<int64_t, uint64_t> leftovers;
  Status s = FindLeftovers(at.snapshot(), &leftovers);
  if (!s.ok()) problem("", s.WithContext("scan the tensor records"));
  for (const auto& [leftover, records] : leftovers) {
    problem("", Status::Corruption(std::to_string(records) + " tensor records of " + StepName(leftover) +
                                   ", which has no snapshot record (leftovers of a deleted step; "
                                   "`trainsnap verify --repair` deletes them)"));
  }
  if (chunk_deps_cf_ != nullptr) {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, chunk_deps_cf_));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto hash = DecodeChunkKey(std::string_view(it->key().data(), it->key().size()));
      auto base = DecodeChunkKey(std::string_view(it->value().data(), it->value().size()));
      if (!hash.ok()) {
        problem("", hash.status().WithContext("chunk_deps key"));
      } else if (!base.ok()) {
        problem("", base.status().WithContext("chunk_deps of " + hash->Hex()));
      }
    }
    if (!it->status().ok()) problem("", FromRocks(it->status(), "scan the chunk_deps column family"));
  }
  if (std::optional<LostCommits> loss = lost_commits()) {
    problem(CommitLog::kFileName,
            Status::Corruption(DescribeLoss(*loss) + " (acknowledge with `trainsnap verify --acknowledge-loss`)"));
  }
  auto log = CommitLog::Read(path_);
  if (!log.ok()) problem(CommitLog::kFileName, log.status());
}

Status RocksStore::FindLeftovers(const rocksdb::Snapshot* at, std::map<int64_t, uint64_t>* leftovers) {
  rocksdb::ReadOptions ro;
  ro.snapshot = at;
  std::map<int64_t, uint64_t> per_step;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, tensors_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    TRAINSNAP_ASSIGN_OR_RETURN(TensorKey key, DecodeTensorKey(std::string_view(it->key().data(), it->key().size())));
    ++per_step[key.step];
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan tensor records"));
  // A point look-up per step: a record that a scan skipped is still found.
  for (const auto& [step, records] : per_step) {
    std::string value;
    rocksdb::Status s = db_->Get(ro, snapshots_cf_, EncodeStepKey(step), &value);
    if (s.IsNotFound()) {
      leftovers->emplace(step, records);
    } else if (!s.ok()) {
      return FromRocks(s, "read snapshot record of " + StepName(step));
    }
  }
  return Status::OK();
}

Result<RepairReport> RocksStore::Repair() {
  const std::string context = "repair " + path_;
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable(context));
  std::lock_guard<std::mutex> lock(commit_mu_);
  TRAINSNAP_RETURN_IF_ERROR(PrepareWrite().WithContext(context));
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  if (txn_db_ == nullptr) return recovery_error_.WithContext(context + ": store reopened read-only");
  rocksdb::ManagedSnapshot at(db_);
  // The snapshot records must agree with the counts: records of a snapshot
  // that a failed read hid must not be taken for leftovers.
  auto steps = ListSteps(at.snapshot());
  if (!steps.ok()) return steps.status().WithContext(context + ": refusing to repair");
  std::map<int64_t, uint64_t> leftovers;
  TRAINSNAP_RETURN_IF_ERROR(FindLeftovers(at.snapshot(), &leftovers).WithContext(context));
  RepairReport report;
  if (leftovers.empty()) return report;
  TRAINSNAP_ASSIGN_OR_RETURN(std::optional<StoreCountsData> stored_counts, ReadCounts(at.snapshot()));
  StoreCountsData counts = stored_counts.value_or(StoreCountsData());
  rocksdb::WriteBatch batch;
  rocksdb::ReadOptions ro;
  ro.snapshot = at.snapshot();
  for (const auto& [step, records] : leftovers) {
    const std::string prefix = TensorKeyPrefix(step);
    const std::string upper = PrefixUpperBound(prefix);
    rocksdb::Slice upper_slice(upper);
    rocksdb::ReadOptions scan = ro;
    if (!upper.empty()) scan.iterate_upper_bound = &upper_slice;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(scan, tensors_cf_));
    for (it->Seek(prefix); it->Valid(); it->Next()) {
      TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Delete(tensors_cf_, it->key()), "delete leftover tensor record"));
      ++report.tensor_records;
    }
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), context + ": scan tensor records of " + StepName(step)));
    report.steps.push_back(step);
  }
  ++counts.transactions;
  TRAINSNAP_RETURN_IF_ERROR(PutCounts(&batch, counts));
  rocksdb::WriteOptions wo;
  wo.sync = sync_;
  TRAINSNAP_RETURN_IF_ERROR(CheckWrite(db_->Write(wo, &batch), context));
  TRAINSNAP_RETURN_IF_ERROR(NoteTransaction(counts).WithContext(context));
  return report;
}

Result<StoreStats> RocksStore::Stats(const ProgressFn& progress) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  const std::string context = "stats " + path_;
  StoreStats stats;
  auto list = ListLocked();
  if (!list.ok()) return list.status().WithContext(context);
  for (const SnapshotInfo& info : *list) {
    ++stats.snapshots;
    stats.logical_bytes += info.logical_bytes;
    stats.referenced_bytes += info.stored_bytes;
  }
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> live;
  Status s = CollectLiveChunks(&live);
  if (!s.ok()) return s.WithContext(context);
  uint64_t estimate = 0;
  db_->GetIntProperty(chunks_cf_, "rocksdb.estimate-num-keys", &estimate);
  uint64_t blob_values = 0;  // bytes the stored chunk values take in blob files (with record headers)
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), chunks_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto hash = DecodeChunkKey(std::string_view(it->key().data(), it->key().size()));
    if (!hash.ok()) return hash.status().WithContext(context);
    ++stats.chunks;
    if (progress) progress(stats.chunks, std::max(estimate, stats.chunks));
    const std::string_view value(it->value().data(), it->value().size());
    stats.chunk_stored_bytes += value.size();
    if (value.size() >= kMinBlobBytes) blob_values += value.size() + kBlobRecordOverhead;
    auto header = ParseChunkHeader(value);
    if (header.ok()) stats.chunk_raw_bytes += header->raw_bytes;
    if (!live.count(*hash)) {
      ++stats.collectable_chunks;
      stats.collectable_bytes += value.size();
    }
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), context + ": scan chunks"));
  rocksdb::ColumnFamilyMetaData meta;
  db_->GetColumnFamilyMetaData(chunks_cf_, &meta);
  for (const rocksdb::BlobMetaData& b : meta.blob_files) stats.blob_garbage_bytes += b.garbage_blob_bytes;
  uint64_t blob_files = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(path_, ec)) {
    std::error_code size_ec;
    const uint64_t size = e.is_regular_file(size_ec) ? e.file_size(size_ec) : 0;
    if (size_ec) continue;  // a file RocksDB removed while we listed
    stats.disk_bytes += size;
    const std::string ext = e.path().extension().string();
    if (ext == ".sst") {
      stats.sst_bytes += size;
    } else if (ext == ".blob") {
      stats.blob_bytes += size;
      ++blob_files;
    } else if (ext == ".log") {
      stats.wal_bytes += size;
    } else if (e.path().filename() == kReserveFile) {
      stats.reserve_bytes += size;
    } else {
      stats.other_bytes += size;
    }
  }
  if (ec) return Status::IOError(context + ": list " + path_ + ": " + ec.message());
  // Chunk values still in a memtable (not yet flushed) count as in blob
  // files here, so this is a lower bound.
  const uint64_t accounted = blob_files * kBlobFileOverhead + blob_values + stats.blob_garbage_bytes;
  stats.blob_uncompacted_bytes = stats.blob_bytes > accounted ? stats.blob_bytes - accounted : 0;
  return stats;
}

}  // namespace trainsnap::internal

namespace trainsnap {

Result<std::unique_ptr<Store>> Store::Open(const std::string& path, const StoreOptions& options) {
  return internal::RocksStore::OpenWritable(path, options);
}

Result<std::unique_ptr<Store>> Store::OpenReadOnly(const std::string& path) {
  return internal::RocksStore::OpenReadOnlyInstance(path);
}

Result<GcPlan> PlanCollection(Store& store, const std::vector<int64_t>& steps, const ProgressFn& progress) {
  auto* rocks = dynamic_cast<internal::RocksStore*>(&store);
  if (rocks == nullptr) return Status::NotSupported("plan collection: not a store opened by Store::Open/OpenReadOnly");
  return rocks->PlanCollection(steps, progress);
}

}  // namespace trainsnap
