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

#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/snapshot.h>
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
// would misread).
constexpr uint32_t kMetaFormatVersion = 2;
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

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string StepName(int64_t step) { return "step " + std::to_string(step); }

// How errors name a TensorRead (built only when one is reported).
std::string ReadName(const TensorRead& read) {
  if (!read.name.empty()) return read.name;
  return "read tensor param_id " + std::to_string(read.record->param_id) + " role " + read.record->role;
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
  chunks.enable_blob_garbage_collection = true;
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

rocksdb::DBOptions BaseDbOptions() {
  rocksdb::DBOptions o;
  o.paranoid_checks = true;
  static const auto logger = std::make_shared<DiscardLogger>();
  o.info_log = logger;
  // Snapshot and tensor records are small: their memtables seldom fill, and a
  // WAL file lives until every CF with data in it is flushed. Bound the WAL
  // (RocksDB's default bound is 4x all memtables, ~2.5 GiB here): past this,
  // RocksDB flushes the CFs that pin the oldest WAL file.
  o.max_total_wal_size = uint64_t{256} << 20;
  return o;
}

bool StoreExists(const std::string& path) {
  std::error_code ec;
  return fs::exists(fs::path(path) / "CURRENT", ec);
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
  if (options.delta_reference != DeltaReference::kKeyframe && options.delta_reference != DeltaReference::kParent) {
    return Status::InvalidArgument(context + ": unknown delta_reference " +
                                   std::to_string(static_cast<int>(options.delta_reference)));
  }
  if (!StoreExists(path)) {
    if (!options.create_if_missing) {
      return Status::NotFound(context + ": no store at this path (create_if_missing is false)");
    }
    // RocksDB creates only the last path component.
    std::error_code ec;
    fs::create_directories(path, ec);
    if (ec) return Status::IOError(context + ": create directory: " + ec.message());
  }
  store->zstd_level_ = options.zstd_level == 0 ? 1 : options.zstd_level;
  store->compress_ = options.compress;
  store->sync_ = options.sync;
  store->options_ = options;
  store->env_ = env;
  store->retention_ = options.retention;
  store->keyframe_interval_ = options.keyframe_interval;
  store->delta_reference_ = options.delta_reference;
  store->delta_bases_.SetBudget(options.delta_base_cache_bytes ? options.delta_base_cache_bytes
                                                               : kDefaultDeltaBaseCacheBytes);
  store->threads_ = options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  TRAINSNAP_RETURN_IF_ERROR(store->OpenDb(path, options, /*read_only=*/false, env));
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
  s = store->WarmChunkSizes();
  if (!s.ok()) return s.WithContext(context);
  return std::unique_ptr<Store>(std::move(store));
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
  if (!StoreExists(path)) return Status::NotFound(context + ": no store at this path");
  std::unique_ptr<RocksStore> store(new RocksStore());
  store->read_only_ = true;
  store->env_ = env;
  store->threads_ = std::max(1u, std::thread::hardware_concurrency());
  TRAINSNAP_RETURN_IF_ERROR(store->OpenDb(path, StoreOptions(), /*read_only=*/true, env));
  Status s = store->LoadOrCreateMeta(StoreOptions());
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
    rocksdb::Status s;
    for (int attempt = 0; attempt < 3; ++attempt) {
      rocksdb::DB* db = nullptr;
      out->handles.clear();
      s = rocksdb::DB::OpenForReadOnly(db_options, path, cfs, &out->handles, &db,
                                       /*error_if_wal_file_exists=*/false);
      if (s.ok()) {
        out->db = db;
        return Status::OK();
      }
      // The writer may delete an obsolete WAL or table file while we list them.
      if (!s.IsIOError() && !s.IsNotFound() && !s.IsPathNotFound()) break;
    }
    return FromRocks(s, "open store " + path + " read-only", path);
  }
  db_options.create_if_missing = options.create_if_missing;
  db_options.create_missing_column_families = true;
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
    if (read_only_) return Status::InvalidArgument("not a trainsnap store (no meta record)");
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), snapshots_cf_));
    it->SeekToFirst();
    if (it->Valid()) return Status::Corruption("the store holds snapshots but no meta record");
    proto::StoreMeta meta;
    meta.set_format_version(kMetaFormatVersion);
    meta.set_chunk_bytes(options.chunk_bytes ? options.chunk_bytes : kDefaultChunkBytes);
    meta.set_hash(kHashName);
    meta.set_created_unix_ms(NowUnixMs());
    rocksdb::WriteOptions wo;
    wo.sync = true;
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(db_->Put(wo, meta_cf_, kMetaStoreKey, meta.SerializeAsString()),
                                        "write meta record"));
    chunk_bytes_ = meta.chunk_bytes();
    return Status::OK();
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "read meta record"));
  proto::StoreMeta meta;
  if (!meta.ParseFromString(value)) return Status::Corruption("meta record does not parse");
  if (meta.format_version() < kOldestMetaFormatVersion || meta.format_version() > kMetaFormatVersion) {
    return Status::NotSupported("store format version " + std::to_string(meta.format_version()) +
                                " is not supported (this build reads versions " +
                                std::to_string(kOldestMetaFormatVersion) + ".." +
                                std::to_string(kMetaFormatVersion) + ")");
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
  chunk_bytes_ = meta.chunk_bytes();
  if (!read_only_ && meta.format_version() < kMetaFormatVersion) {
    // This writer may add delta chunks: builds that know only version 1 must
    // refuse the store rather than misread it.
    meta.set_format_version(kMetaFormatVersion);
    rocksdb::WriteOptions wo;
    wo.sync = true;
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(db_->Put(wo, meta_cf_, kMetaStoreKey, meta.SerializeAsString()),
                                        "upgrade meta record to format version " +
                                            std::to_string(kMetaFormatVersion)));
  }
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
  // Open the new view first: on failure the old one stays usable.
  DbHandles fresh;
  TRAINSNAP_RETURN_IF_ERROR(OpenRocks(path_, StoreOptions(), /*read_only=*/true, env_, &fresh));
  std::unique_lock<std::shared_mutex> lock(db_mu_);
  DbHandles old{txn_db_, db_, handles_};
  Adopt(fresh);
  lock.unlock();
  CloseRocks(&old);
  return Status::OK();
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

// --- reading -------------------------------------------------------------------

Result<std::optional<SnapshotRecordData>> RocksStore::ReadSnapshotRecord(int64_t step) {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), snapshots_cf_, EncodeStepKey(step), &value);
  if (s.IsNotFound()) return std::optional<SnapshotRecordData>();
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "read snapshot record"));
  TRAINSNAP_ASSIGN_OR_RETURN(SnapshotRecordData data, ParseSnapshotRecord(value, step));
  return std::optional<SnapshotRecordData>(std::move(data));
}

Result<std::vector<int64_t>> RocksStore::ListSteps() {
  std::vector<int64_t> steps;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), snapshots_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    TRAINSNAP_ASSIGN_OR_RETURN(int64_t step, DecodeStepKey(std::string_view(it->key().data(), it->key().size())));
    steps.push_back(step);
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "list snapshots"));
  return steps;
}

Result<std::vector<SnapshotInfo>> RocksStore::List() {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  return ListLocked();
}

Result<std::vector<SnapshotInfo>> RocksStore::ListLocked(const rocksdb::Snapshot* at) {
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
  return out;
}

Result<std::optional<int64_t>> RocksStore::Latest() {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), snapshots_cf_));
  it->SeekToLast();
  if (!it->Valid()) {
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "latest snapshot"));
    return std::optional<int64_t>();
  }
  auto step = DecodeStepKey(std::string_view(it->key().data(), it->key().size()));
  if (!step.ok()) return step.status().WithContext("latest snapshot");
  return std::optional<int64_t>(*step);
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

  std::vector<TensorRecord> out;
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
      return record.status().WithContext(StepName(step) + ": tensor param_id " + std::to_string(key->param_id) +
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
  const std::string name = StepName(step) + ": tensor param_id " + std::to_string(param_id) + " role " +
                           std::string(role);
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), tensors_cf_, EncodeTensorKey(step, param_id, role), &value);
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
                                                const std::string& manifest, bool replace_existing) {
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
    // Replacing: the old tensor records go in the same transaction.
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
  for (const TensorRecord& r : records) {
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(
        batch.Put(tensors_cf_, EncodeTensorKey(info.step, r.param_id, r.role), SerializeTensorRecord(r)),
        "write tensor record"));
  }
  info.manifest_bytes = manifest.size();
  TRAINSNAP_RETURN_IF_ERROR(
      FromRocks(batch.Put(snapshots_cf_, step_key, SerializeSnapshotRecord(info, manifest)), "write snapshot record"));
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
  TRAINSNAP_KILL_POINT(kKillAfterCommit);

  if (retention_.keep_last > 0) {
    // The snapshot is committed whatever happens here: a failed prune is
    // retried after the next commit, and must not report the commit failed.
    static_cast<void>(PruneLocked(retention_, /*full_gc=*/false, info.step));
  }
  return info;
}

// --- deleting and garbage collection ------------------------------------------

Status RocksStore::DeleteSteps(const std::vector<int64_t>& steps, std::vector<ChunkRef>* released) {
  rocksdb::WriteBatch batch;
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
  return CheckWrite(db_->Write(wo, &batch), "delete snapshots");
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
  TRAINSNAP_RETURN_IF_ERROR(PrepareWrite().WithContext(context));
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  TRAINSNAP_RETURN_IF_ERROR(CheckStored(step).WithContext(context));
  return DeleteSteps({step}, nullptr).WithContext(context);
}

Status RocksStore::Rollback(int64_t step) {
  const std::string context = "rollback to " + StepName(step);
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable(context));
  std::lock_guard<std::mutex> lock(commit_mu_);
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
}

Status RocksStore::CollectLiveChunks(std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher>* live) {
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
                                         std::to_string(key->param_id) + " role " + key->role);
    }
    ++records_per_step[key->step];
    for (const ChunkRef& c : record->chunks) live->emplace(c.hash, c.stored_bytes);
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan tensor records"));
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<SnapshotInfo> snapshots, ListLocked(at.snapshot()));
  const std::string refuse = "scan of live chunks: refusing to collect garbage (run `trainsnap verify`): ";
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
                              ", which has no snapshot record");
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
  std::lock_guard<std::mutex> lock(commit_mu_);
  TRAINSNAP_RETURN_IF_ERROR(PrepareWrite().WithContext("collect garbage"));
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  auto report = CollectGarbageLocked(progress);
  if (!report.ok()) return report.status().WithContext("collect garbage in " + path_);
  return report;
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
  return Status::InvalidArgument(StepName(step) + " is below the latest stored " + StepName(latest) +
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
  std::lock_guard<std::mutex> lock(commit_mu_);
  TRAINSNAP_RETURN_IF_ERROR(PrepareWrite().WithContext("prune"));
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  auto report = PruneLocked(policy, /*full_gc=*/true);
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
  } else {
    auto all = ListSteps();
    if (!all.ok()) return all.status().WithContext(context);
    steps = std::move(*all);
  }
  VerifyReport report;
  for (size_t si = 0; si < steps.size(); ++si) {
    const int64_t s = steps[si];
    ++report.snapshots;
    if (progress) progress(si, steps.size());
    auto record = ReadSnapshotRecord(s);
    if (!record.ok()) {
      report.problems.push_back({s, 0, "", -1, {}, record.status().WithContext(StepName(s) + ": snapshot record")});
      continue;
    }
    uint64_t tensors_seen = 0;
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
        report.problems.push_back({s, 0, "", -1, {}, key.status().WithContext(StepName(s))});
        continue;
      }
      const std::string where = StepName(s) + ": tensor param_id " + std::to_string(key->param_id) + " role " +
                                key->role;
      auto tensor = ParseTensorRecord(std::string_view(it->value().data(), it->value().size()), key->param_id,
                                      key->role);
      if (!tensor.ok()) {
        report.problems.push_back({s, key->param_id, key->role, -1, {}, tensor.status().WithContext(where)});
        continue;
      }
      // Chunks are read, decoded and re-hashed in parallel; problems are
      // reported in chunk order.
      const size_t n = tensor->chunks.size();
      std::vector<Status> chunk_status(n);
      std::atomic<uint64_t> good_bytes{0};
      static_cast<void>(ParallelFor(*pool_, n, [&](size_t ci) -> Status {
        const ChunkRef& ref = tensor->chunks[ci];
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
          report.problems.push_back({s, key->param_id, key->role, static_cast<int64_t>(ci), tensor->chunks[ci].hash,
                                     std::move(chunk_status[ci])});
        }
      }
    }
    if (!it->status().ok()) {
      report.problems.push_back({s, 0, "", -1, {}, FromRocks(it->status(), StepName(s) + ": scan tensor records")});
    } else if (record->has_value() && (*record)->info.tensors != tensors_seen) {
      report.problems.push_back({s, 0, "", -1, {},
                                 Status::Corruption(StepName(s) + ": snapshot record lists " +
                                                    std::to_string((*record)->info.tensors) +
                                                    " tensors, the store holds " + std::to_string(tensors_seen))});
    }
  }
  if (progress) progress(steps.size(), steps.size());
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
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), chunks_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto hash = DecodeChunkKey(std::string_view(it->key().data(), it->key().size()));
    if (!hash.ok()) return hash.status().WithContext(context);
    ++stats.chunks;
    if (progress) progress(stats.chunks, std::max(estimate, stats.chunks));
    const std::string_view value(it->value().data(), it->value().size());
    stats.chunk_stored_bytes += value.size();
    auto header = ParseChunkHeader(value);
    if (header.ok()) stats.chunk_raw_bytes += header->raw_bytes;
    if (!live.count(*hash)) {
      ++stats.collectable_chunks;
      stats.collectable_bytes += value.size();
    }
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), context + ": scan chunks"));
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(path_, ec)) {
    std::error_code size_ec;
    const uint64_t size = e.is_regular_file(size_ec) ? e.file_size(size_ec) : 0;
    if (size_ec) continue;  // a file RocksDB removed while we listed
    const std::string ext = e.path().extension().string();
    if (ext == ".sst") stats.sst_bytes += size;
    else if (ext == ".blob") stats.blob_bytes += size;
    else if (ext == ".log") stats.wal_bytes += size;
  }
  if (ec) return Status::IOError(context + ": list " + path_ + ": " + ec.message());
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

}  // namespace trainsnap
