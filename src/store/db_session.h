// DbSession: a store's RocksDB instance (docs/code-map.md, "The store's
// parts"): opening it writable or read-only, the views that readers hold of
// it, writes that recover from a failed write or background job, and, for
// read-only stores, Refresh and newer instances (the writer's state now).
//
// Thread-safe. A view (AcquireView: db_mu_ shared) keeps the instance and
// its column family handles valid while it is held; recovery and Refresh
// swap the instance under db_mu_ exclusive. Lock order: resume_mu_, then
// db_mu_, then newer_mu_. Callers that serialize writes (the store's commit
// lock) take their lock before any of these.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/utilities/optimistic_transaction_db.h>
#include <rocksdb/write_batch.h>

#include "common/mutex.h"
#include "store/column_families.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

class DbSession {
 public:
  // An open RocksDB instance and its column family handles (by ColumnFamily).
  struct Handles {
    rocksdb::OptimisticTransactionDB* txn_db = nullptr;  // writable only; the same object as db
    rocksdb::DB* db = nullptr;
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    // Null when the instance lacks it (chunk_deps in a read-only open of a
    // store written before delta chunks).
    rocksdb::ColumnFamilyHandle* cf(ColumnFamily which) const {
      const auto i = static_cast<size_t>(which);
      return i < handles.size() ? handles[i] : nullptr;
    }
  };
  // Opens the database at `path` into *out: writable (RocksDB creates it when
  // options.create_if_missing), or read-only, retried while the writer
  // deletes WAL files under the open. Errors name the path.
  static Status OpenRocks(const std::string& path, const StoreOptions& options, bool read_only, rocksdb::Env* env,
                          Handles* out);
  static void CloseRocks(Handles* h);

  // A read-only instance opened after the session's own (NewerThan).
  struct Newer {
    Handles handles;
    uint64_t id = 0;  // newer_opened() when it was opened
    ~Newer() { CloseRocks(&handles); }
  };

  // `env` (not owned; null: RocksDB's default) must outlive the session.
  DbSession(std::string path, bool read_only, rocksdb::Env* env)
      : path_(std::move(path)), read_only_(read_only), env_(env) {}
  ~DbSession();
  DbSession(const DbSession&) = delete;
  DbSession& operator=(const DbSession&) = delete;

  // Opens the instance; `options` is kept for reopening after a failure
  // (writable sessions never create the database again then).
  Status Open(const StoreOptions& options);

  const std::string& path() const { return path_; }
  bool read_only() const { return read_only_; }
  rocksdb::Env* env() const { return env_; }

  // --- views -------------------------------------------------------------------------
  // Holds db_mu_ shared. When a failed recovery left no instance it retries
  // the reopen first; an error when that fails too.
  Status AcquireView(std::shared_lock<std::shared_mutex>* lock);
  // Valid while a view is held. txn_db() is null for a read-only session and
  // for a writable one that a failed recovery left with a read-only instance
  // (recovery_error() says why).
  rocksdb::DB* db() const { return current_.db; }
  rocksdb::OptimisticTransactionDB* txn_db() const { return current_.txn_db; }
  rocksdb::ColumnFamilyHandle* cf(ColumnFamily which) const { return current_.cf(which); }
  const std::vector<rocksdb::ColumnFamilyHandle*>& handles() const { return current_.handles; }
  const Status& recovery_error() const { return recovery_error_; }

  // --- writes (writable sessions) ------------------------------------------------------
  // After a failed write (or a failed background job) RocksDB refuses further
  // writes; the next write reopens the database (and fails with the reopen's
  // status while the fault lasts). Called by every write operation before it
  // takes a view.
  Status PrepareWrite();
  // Maps a write's status; any failure but Busy and InvalidArgument makes the
  // next PrepareWrite reopen. Caller holds a view.
  Status CheckWrite(const rocksdb::Status& s, std::string_view context);
  // The one write path of batches that may be written twice (idempotent):
  // writes `batch` under the held view; when it fails because a background
  // job failed (or a recovery ran) after PrepareWrite looked, recovers and
  // writes it once more. Caller holds the view in *view_lock, nothing else
  // of the session.
  Status WriteWithRecovery(rocksdb::WriteBatch* batch, const rocksdb::WriteOptions& wo, std::string_view context,
                           std::shared_lock<std::shared_mutex>* view_lock);
  // Called after every swap of the instance (a recovery's reopen, Refresh),
  // with no lock of the session held: state cached from the old instance
  // (dedup answers, records) is dropped there. Set once, before use.
  void set_on_swap(std::function<void()> on_swap) { on_swap_ = std::move(on_swap); }

  // --- read-only sessions --------------------------------------------------------------
  // Opens a new instance first (on failure the old one stays usable), then
  // swaps it in. OK without doing anything for a writable session.
  Status Refresh();
  // The newest instance opened after newer_opened() was `since`; one is
  // opened now when there is none. Opened under newer_mu_, so an instance
  // newer than `since` sees what the writer did before the caller read
  // `since`.
  Result<std::shared_ptr<const Newer>> NewerThan(uint64_t since);
  uint64_t newer_opened();
  // The newest instance opened so far; null when none was.
  std::shared_ptr<const Newer> newest();

 private:
  // What a write saw before it ran, to tell afterwards whether a background
  // job failed (or a recovery ran) under it: then the write met a stale
  // error, not a fault of its own, and is retried once.
  struct WriteMark {
    uint64_t background_errors = 0;
    uint64_t generation = 0;
  };
  WriteMark MarkWrite() const;
  bool FailedInBackground(const WriteMark& mark);
  // Sets needs_resume_ when RocksDB recorded a background error (a failed
  // flush or compaction) since the last check: the database then refuses
  // writes although no call of this session failed.
  void NoteBackgroundErrors();
  // Closes and reopens the database; falls back to a read-only instance, or
  // none, when the writable open fails.
  Status ReopenLocked() REQUIRES(resume_mu_);
  void SwapIn(const Handles& h);  // caller holds db_mu_ exclusive (or is the only user)

  const std::string path_;
  const bool read_only_;
  rocksdb::Env* const env_;  // not owned; null = default
  StoreOptions options_;     // as opened; for reopening after a failure
  std::function<void()> on_swap_;

  std::shared_mutex db_mu_;
  Handles current_;        // guarded by db_mu_ (readers hold it shared)
  Status recovery_error_;  // why current_ is read-only or empty; guarded by db_mu_

  Mutex resume_mu_;  // serializes recoveries
  std::atomic<bool> needs_resume_{false};
  // RocksDB's count of background errors (failed flushes, compactions) seen
  // so far by this instance of the database; reset on reopen.
  std::atomic<uint64_t> background_errors_seen_{0};
  std::atomic<uint64_t> generation_{0};  // bumped by every reopen

  Mutex newer_mu_;
  std::shared_ptr<const Newer> newer_ GUARDED_BY(newer_mu_);
  uint64_t newer_opened_ GUARDED_BY(newer_mu_) = 0;
};

}  // namespace trainsnap::internal
