#include "store/db_session.h"

#include <algorithm>
#include <filesystem>

#include "store/rocksdb_status.h"
#include "store/schema.h"

namespace trainsnap::internal {

namespace fs = std::filesystem;

Status DbSession::OpenRocks(const std::string& path, const StoreOptions& options, bool read_only, rocksdb::Env* env,
                            Handles* out) {
  rocksdb::DBOptions db_options = BaseDbOptions();
  if (env) db_options.env = env;
  auto cfs = ColumnFamilies();
  if (read_only) {
    // A store written before delta chunks has no chunk_deps CF; a read-only
    // instance cannot create it (and needs none: such a store has no deltas).
    std::vector<std::string> names;
    if (rocksdb::DB::ListColumnFamilies(db_options, path, &names).ok() &&
        std::find(names.begin(), names.end(), ColumnFamilyName(ColumnFamily::kChunkDeps)) == names.end()) {
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
  rocksdb::Status s =
      rocksdb::OptimisticTransactionDB::Open(db_options, TransactionDbOptions(), path, cfs, &out->handles, &db);
  if (!s.ok()) return FromRocks(s, "open store " + path, path);
  out->txn_db = db;
  out->db = db;
  return Status::OK();
}

void DbSession::CloseRocks(Handles* h) {
  if (!h->db) return;
  for (rocksdb::ColumnFamilyHandle* cf : h->handles) h->db->DestroyColumnFamilyHandle(cf).PermitUncheckedError();
  h->db->Close().PermitUncheckedError();
  delete h->db;
  *h = Handles();
}

DbSession::~DbSession() {
  {
    MutexLock lock(&newer_mu_);
    newer_.reset();
  }
  CloseRocks(&current_);
}

Status DbSession::Open(const StoreOptions& options) {
  options_ = options;
  Handles h;
  TRAINSNAP_RETURN_IF_ERROR(OpenRocks(path_, options, read_only_, env_, &h));
  SwapIn(h);
  return Status::OK();
}

void DbSession::SwapIn(const Handles& h) {
  current_ = h;
  if (on_swap_) on_swap_();
}

Status DbSession::AcquireView(std::shared_lock<std::shared_mutex>* lock) {
  *lock = std::shared_lock<std::shared_mutex>(db_mu_);
  if (current_.db != nullptr) return Status::OK();
  // A failed recovery left no database (the fault was still there). Try
  // again now: reads must work as soon as the fault clears, not only after
  // the next write.
  lock->unlock();
  {
    MutexLock recovering(&resume_mu_);
    bool still_closed;
    {
      std::shared_lock<std::shared_mutex> check(db_mu_);
      still_closed = current_.db == nullptr;
    }
    if (still_closed) static_cast<void>(ReopenLocked());
  }
  *lock = std::shared_lock<std::shared_mutex>(db_mu_);
  if (current_.db == nullptr) {
    return Status(recovery_error_.code(), "store " + path_ + " has no open database after a failed recovery (" +
                                              recovery_error_.message() + ")");
  }
  return Status::OK();
}

void DbSession::NoteBackgroundErrors() {
  std::shared_lock<std::shared_mutex> lock(db_mu_);
  if (current_.db == nullptr || current_.txn_db == nullptr) return;
  uint64_t count = 0;
  if (!current_.db->GetIntProperty(rocksdb::DB::Properties::kBackgroundErrors, &count)) return;
  uint64_t seen = background_errors_seen_.load();
  while (count > seen && !background_errors_seen_.compare_exchange_weak(seen, count)) {
  }
  if (count > seen) needs_resume_.store(true);
}

DbSession::WriteMark DbSession::MarkWrite() const {
  return WriteMark{background_errors_seen_.load(), generation_.load()};
}

bool DbSession::FailedInBackground(const WriteMark& mark) {
  // A failed flush or compaction bumps RocksDB's count under the DB mutex
  // right after it sets the background error, so a write refused because of
  // that error finds the count already bumped.
  NoteBackgroundErrors();
  return generation_.load() != mark.generation || background_errors_seen_.load() > mark.background_errors;
}

Status DbSession::PrepareWrite() {
  NoteBackgroundErrors();
  if (!needs_resume_.load()) return Status::OK();
  MutexLock lock(&resume_mu_);
  if (!needs_resume_.load()) return Status::OK();  // another thread recovered
  return ReopenLocked().WithContext("reopen after a failed write");
}

Status DbSession::ReopenLocked() {
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
  Handles old = current_;
  current_ = Handles();
  CloseRocks(&old);
  generation_.fetch_add(1);
  background_errors_seen_ = 0;  // a new instance counts from zero
  StoreOptions reopen = options_;
  reopen.create_if_missing = false;
  Handles fresh;
  Status s = OpenRocks(path_, reopen, /*read_only=*/false, env_, &fresh);
  if (s.ok()) {
    // Dedup answers and cached records must come from the reopened database.
    SwapIn(fresh);
    needs_resume_ = false;
    recovery_error_ = Status::OK();
    return Status::OK();
  }
  // Opening for writing needs space (a new WAL, the recovered memtable's
  // table file). Until the next write retries, serve reads from a read-only
  // instance, which writes nothing; without one, the next read retries.
  needs_resume_ = true;
  recovery_error_ = s;
  Handles reader;
  if (OpenRocks(path_, reopen, /*read_only=*/true, env_, &reader).ok()) {
    SwapIn(reader);
  } else if (on_swap_) {
    on_swap_();
  }
  return s;
}

Status DbSession::WriteWithRecovery(rocksdb::WriteBatch* batch, const rocksdb::WriteOptions& wo,
                                    std::string_view context, std::shared_lock<std::shared_mutex>* view_lock) {
  const WriteMark mark = MarkWrite();
  Status written = CheckWrite(current_.db->Write(wo, batch), context);
  if (written.ok() || !FailedInBackground(mark)) return written;
  // A flush or compaction failed after PrepareWrite looked, and the database
  // refused this batch for it: recover and write the same batch once more.
  view_lock->unlock();
  TRAINSNAP_RETURN_IF_ERROR(PrepareWrite().WithContext(context));
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(view_lock));
  if (current_.txn_db == nullptr) {
    return recovery_error_.WithContext(std::string(context) + ": store reopened read-only after a failed write");
  }
  return CheckWrite(current_.db->Write(wo, batch), context);
}

Status DbSession::CheckWrite(const rocksdb::Status& s, std::string_view context) {
  // No mutex: callers hold db_mu_ shared, and PrepareWrite holds
  // resume_mu_ while it waits for db_mu_ exclusively.
  if (!s.ok() && !s.IsBusy() && !s.IsInvalidArgument()) needs_resume_.store(true);
  return FromRocks(s, context);
}

Status DbSession::Refresh() {
  if (!read_only_) return Status::OK();
  Handles fresh;
  TRAINSNAP_RETURN_IF_ERROR(OpenRocks(path_, StoreOptions(), /*read_only=*/true, env_, &fresh));
  std::unique_lock<std::shared_mutex> lock(db_mu_);
  Handles old = current_;
  SwapIn(fresh);
  lock.unlock();
  CloseRocks(&old);
  // The new instance is the newest: newer ones opened before are dropped.
  MutexLock newer_lock(&newer_mu_);
  newer_.reset();
  return Status::OK();
}

Result<std::shared_ptr<const DbSession::Newer>> DbSession::NewerThan(uint64_t since) {
  MutexLock lock(&newer_mu_);
  if (newer_ && newer_->id > since) return newer_;
  auto newer = std::make_shared<Newer>();
  TRAINSNAP_RETURN_IF_ERROR(OpenRocks(path_, StoreOptions(), /*read_only=*/true, env_, &newer->handles));
  if (newer->handles.cf(ColumnFamily::kChunks) == nullptr) {
    return Status::Corruption("open store " + path_ + " read-only: column families missing");
  }
  newer->id = ++newer_opened_;
  newer_ = newer;
  return std::shared_ptr<const Newer>(newer);
}

uint64_t DbSession::newer_opened() {
  MutexLock lock(&newer_mu_);
  return newer_opened_;
}

std::shared_ptr<const DbSession::Newer> DbSession::newest() {
  MutexLock lock(&newer_mu_);
  return newer_;
}

}  // namespace trainsnap::internal
