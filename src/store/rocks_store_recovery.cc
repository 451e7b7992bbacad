// Recovery after a failed write or background job: the store reopens its
// database on the next write (PrepareWrite) and serves reads meanwhile.
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"

#include "store/rocksdb_status.h"

namespace trainsnap::internal {

Status RocksStore::AcquireView(std::shared_lock<std::shared_mutex>* lock) {
  *lock = std::shared_lock<std::shared_mutex>(db_mu_);
  if (db_ != nullptr) return Status::OK();
  // A failed recovery left no database (the fault was still there). Try
  // again now: reads must work as soon as the fault clears, not only after
  // the next write.
  lock->unlock();
  {
    MutexLock recovering(&resume_mu_);
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
  MutexLock lock(&resume_mu_);
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

Status RocksStore::WriteWithRecovery(rocksdb::WriteBatch* batch, const rocksdb::WriteOptions& wo,
                                     std::string_view context, std::shared_lock<std::shared_mutex>* view_lock) {
  const WriteMark mark = MarkWrite();
  Status written = CheckWrite(db_->Write(wo, batch), context);
  if (written.ok() || !FailedInBackground(mark)) return written;
  // A flush or compaction failed after PrepareWrite looked, and the database
  // refused this batch for it: recover and write the same batch once more.
  view_lock->unlock();
  TRAINSNAP_RETURN_IF_ERROR(PrepareWrite().WithContext(context));
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(view_lock));
  if (txn_db_ == nullptr) {
    return recovery_error_.WithContext(std::string(context) + ": store reopened read-only after a failed write");
  }
  return CheckWrite(db_->Write(wo, batch), context);
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

}  // namespace trainsnap::internal
