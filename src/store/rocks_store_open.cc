// Opening a store: option checks, what is at the path (a store, a
// creation to finish, something else), and the order the parts open in.
#include "store/rocks_store.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "store.pb.h"
#include "store/chunk_codec.h"
#include "store/commit_log.h"
#include "store/creation_marker.h"
#include "store/kill_point.h"
#include "store/rocksdb_status.h"
#include "common/thread_priority.h"
#include "store/schema.h"
#include "store/store_files.h"

namespace trainsnap::internal {

namespace fs = std::filesystem;

namespace {

enum class PathKind {
  kAbsent,    // nothing: a writable open may create a store
  kEmptyDir,  // an empty directory: likewise
  kDatabase,  // a directory with a CURRENT file: a RocksDB database
  kCreating,  // a directory with the creation marker (creation_marker.h)
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
    for (const char* cf : {ColumnFamilyName(ColumnFamily::kMeta), ColumnFamilyName(ColumnFamily::kSnapshots),
                         ColumnFamilyName(ColumnFamily::kTensors), ColumnFamilyName(ColumnFamily::kChunks)}) {
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
  if (std::binary_search(names.begin(), names.end(), std::string(kCreationMarker))) return PathKind::kCreating;
  if (std::binary_search(names.begin(), names.end(), std::string("CURRENT"))) return PathKind::kDatabase;
  return DescribeNotADatabase(path, names, context);
}


}  // namespace

// --- open ----------------------------------------------------------------------

RocksStore::RocksStore(const std::string& path, bool read_only, rocksdb::Env* env, const StoreOptions& options)
    : options_(options), reserve_(path, read_only ? 0 : options.reserve_bytes) {
  threads_ =
      options.threads > 0 ? options.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  pool_ = std::make_unique<boost::asio::thread_pool>(threads_);
  session_ = std::make_unique<DbSession>(path, read_only, env);
  chunks_ = std::make_unique<ChunkStore>(*session_, pool_.get(), threads_);
  catalog_ = std::make_unique<Catalog>(*session_, *chunks_);
  // What a swapped instance invalidates: cached records and dedup answers.
  session_->set_on_swap([this] {
    catalog_->ResetTensorCache();
    chunks_->OnSwap();
  });
  chunks_->delta_bases().SetBudget(options.delta_base_cache_bytes ? options.delta_base_cache_bytes
                                                                  : kDefaultDeltaBaseCacheBytes);
}

Result<std::unique_ptr<Store>> RocksStore::OpenWritable(const std::string& path, const StoreOptions& options,
                                                        rocksdb::Env* env) {
  // Held while this open creates the store (declared first: released after
  // a failed open closed the database).
  std::unique_ptr<CreationMarker> marker;
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
  std::vector<std::string> notes;
  if (create) {
    if (!options.create_if_missing) {
      if (kind == PathKind::kCreating) return InterruptedCreation(context + " (create_if_missing is false)");
      return Status::NotFound(context + ": no store at this path (" +
                              (kind == PathKind::kAbsent ? "it does not exist" : "an empty directory") +
                              "; create_if_missing is false)");
    }
    // RocksDB creates only the last path component.
    std::error_code ec;
    fs::create_directories(path, ec);
    if (ec) return Status::IOError(context + ": create directory: " + ec.message() + " (" + path + ")");
    auto acquired = CreationMarker::Acquire(path);
    // Another process finished creating the store between the look at the
    // path and the marker's lock: open what it created.
    if (acquired.status().code() == StatusCode::kAborted) return OpenWritable(path, options, env);
    if (!acquired.ok()) return acquired.status().WithContext(context);
    marker = std::move(*acquired);
    TRAINSNAP_KILL_POINT(kKillCreateMarked);
    size_t removed = 0;
    TRAINSNAP_RETURN_IF_ERROR(marker->ClearLeftovers(&removed).WithContext(context));
    if (kind == PathKind::kCreating) {
      notes.push_back("store creation had been interrupted (by a crash or a kill): removed the " +
                      std::to_string(removed) + " files it left and created the store again");
    }
  } else {
    TRAINSNAP_RETURN_IF_ERROR(CheckExistingStore(path, options, env).WithContext(context));
    // Before RocksDB opens for writing (which needs a few KiB): on a disk
    // that a failed capture's pack bytes filled, their removal makes room.
    TRAINSNAP_RETURN_IF_ERROR(ChunkStore::RecoverBeforeOpen(path, env).WithContext(context));
  }
  StoreOptions opened_with = options;
  // Only a new store may be created by RocksDB: an existing one whose
  // CURRENT file vanished since the check must not be replaced.
  opened_with.create_if_missing = create;
  std::unique_ptr<RocksStore> store(new RocksStore(path, /*read_only=*/false, env, opened_with));
  store->open_notes_ = std::move(notes);
  Status opened = store->session_->Open(opened_with);
  if (opened.code() == StatusCode::kNoSpace) {
    // Even the few KiB an open writes did not fit: this is what the reserve
    // file is for (the open comes before any delete).
    std::error_code ec;
    if (fs::remove(fs::path(path) / kReserveFile, ec)) opened = store->session_->Open(opened_with);
  }
  TRAINSNAP_RETURN_IF_ERROR(opened);
  if (marker) TRAINSNAP_KILL_POINT(kKillCreateDatabase);
  if (options.worker_nice > 0) {
    Status s = LowerPoolPriority(*store->pool_, static_cast<size_t>(store->threads_), options.worker_nice);
    if (!s.ok()) return s.WithContext(context + ": lower the worker threads' priority");
  }
  if (options.lower_rocksdb_priority) {
    // RocksDB's thread pools belong to its Env (process-wide for the default
    // one, hence opt-in) and take only coarse priorities: kLow is nice 19.
    rocksdb::Env* rocks_env = env != nullptr ? env : rocksdb::Env::Default();
    for (auto pool : {rocksdb::Env::Priority::HIGH, rocksdb::Env::Priority::LOW}) {
      rocksdb::Status rs = rocks_env->LowerThreadPoolCPUPriority(pool, rocksdb::CpuPriority::kLow);
      if (!rs.ok() && !rs.IsNotSupported()) return FromRocks(rs, context + ": lower RocksDB's thread priority");
    }
  }
  Status s = store->catalog_->LoadOrCreateMeta(options);
  if (!s.ok()) return s.WithContext(context);
  if (marker) TRAINSNAP_KILL_POINT(kKillCreateMeta);
  s = store->chunks_->Open(options.sync);
  if (!s.ok()) return s.WithContext(context);
  store->sink_settings_ = {store->catalog_->chunk_bytes(), options.compress,
                           options.zstd_level == 0 ? 1 : options.zstd_level};
  // A damaged commit log (both slots torn) is rewritten from the database:
  // it can then no longer tell what was lost before (docs/reliability.md).
  auto log = CommitLog::Read(path);
  if (!log.ok() && log.status().code() != StatusCode::kCorruption) return log.status().WithContext(context);
  s = store->catalog_->CheckCommitLog(log.ok() ? *log : std::nullopt, options.sync);
  if (!s.ok()) return s.WithContext(context);
  store->WarmChunkSizes();
  {
    MutexLock lock(&store->commit_mu_);
    store->reserve_.Restore();
  }
  s = store->catalog_->UpgradeMeta();
  if (!s.ok()) return s.WithContext(context);
  if (const uint32_t old_version = store->catalog_->upgraded_from()) {
    store->open_notes_.push_back("upgraded the store from format version " + std::to_string(old_version) + " to " +
                                 std::to_string(kMetaFormatVersion) +
                                 " (plane-coded chunks); builds that read only version " +
                                 std::to_string(old_version) + " no longer open it");
  }
  if (marker) {
    TRAINSNAP_KILL_POINT(kKillCreateFinishing);
    TRAINSNAP_RETURN_IF_ERROR(marker->Finish().WithContext(context));
  }
  return std::unique_ptr<Store>(std::move(store));
}

Status RocksStore::CheckExistingStore(const std::string& path, const StoreOptions& options, rocksdb::Env* env) {
  rocksdb::DBOptions db_options = BaseDbOptions();
  if (env) db_options.env = env;
  std::vector<std::string> names;
  TRAINSNAP_RETURN_IF_ERROR(
      FromRocks(rocksdb::DB::ListColumnFamilies(db_options, path, &names), "list column families", path));
  for (const char* cf : {ColumnFamilyName(ColumnFamily::kMeta), ColumnFamilyName(ColumnFamily::kSnapshots),
                         ColumnFamilyName(ColumnFamily::kTensors), ColumnFamilyName(ColumnFamily::kChunks)}) {
    if (std::find(names.begin(), names.end(), cf) != names.end()) continue;
    std::string found;
    for (const std::string& n : names) found += (found.empty() ? "" : ", ") + n;
    return Status::NotSupported("a RocksDB database that is not a trainsnap store (column families: " + found +
                                "); nothing in it was changed");
  }
  DbSession probe(path, /*read_only=*/true, env);
  TRAINSNAP_RETURN_IF_ERROR(probe.Open(StoreOptions()));
  std::string value;
  rocksdb::Status s = probe.db()->Get(rocksdb::ReadOptions(), probe.cf(ColumnFamily::kMeta), kMetaStoreKey, &value);
  if (s.IsNotFound()) {
    // A creation that stopped after RocksDB made the column families and
    // before the meta record: the writable open finishes it. With data in
    // them it is no store this build wrote.
    for (ColumnFamily which : {ColumnFamily::kSnapshots, ColumnFamily::kTensors, ColumnFamily::kChunks}) {
      rocksdb::ColumnFamilyHandle* cf = probe.cf(which);
      std::unique_ptr<rocksdb::Iterator> it(probe.db()->NewIterator(rocksdb::ReadOptions(), cf));
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

void RocksStore::WarmChunkSizes() {
  // Best effort: a damaged record must not keep the store from opening
  // (Verify and reads report it).
  auto latest = catalog_->Latest();
  if (!latest.ok() || !latest->has_value()) return;
  auto records = catalog_->Tensors(**latest);
  if (!records.ok()) return;
  for (const TensorRecord& r : *records) {
    for (const ChunkRef& c : r.chunks) chunks_->registry().NoteStored(c.hash, c.stored_bytes);
  }
}

Result<std::unique_ptr<Store>> RocksStore::OpenReadOnlyInstance(const std::string& path, rocksdb::Env* env) {
  const std::string context = "open store " + path + " read-only";
  TRAINSNAP_ASSIGN_OR_RETURN(const PathKind kind, InspectPath(path, context));
  if (kind == PathKind::kCreating) {
    TRAINSNAP_ASSIGN_OR_RETURN(const CreationState creation, InspectCreation(path));
    if (creation == CreationState::kRunning) {
      return Status::Busy(context + ": the store is being created by another process; open it once that "
                          "process has");
    }
    return InterruptedCreation(context);
  }
  if (kind != PathKind::kDatabase) {
    return Status::NotFound(context + ": no store at this path" +
                            (kind == PathKind::kEmptyDir ? " (an empty directory)" : ""));
  }
  std::unique_ptr<RocksStore> store(new RocksStore(path, /*read_only=*/true, env, StoreOptions()));
  // The commit log first: the writer appends to it after each commit, so a
  // log read before the database was opened never records more than the
  // database then holds, unless commits were really lost.
  auto log = CommitLog::Read(path);
  TRAINSNAP_RETURN_IF_ERROR(store->session_->Open(StoreOptions()));
  Status s = store->catalog_->LoadOrCreateMeta(StoreOptions());
  if (!s.ok()) return s.WithContext(context);
  s = store->chunks_->Open(/*fsync=*/true);
  if (!s.ok()) return s.WithContext(context);
  // A log that cannot be read (damaged) only disables the check here;
  // Verify reports it.
  s = store->catalog_->CheckCommitLog(log.ok() ? *log : std::nullopt, /*sync=*/true);
  if (!s.ok()) return s.WithContext(context);
  return std::unique_ptr<Store>(std::move(store));
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
