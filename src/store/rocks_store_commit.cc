// The commit order of a store: commits, deletes, retention, garbage
// collection and repairs, one at a time under commit_mu_, each over the
// parts (docs/code-map.md, "The store's parts").
#include "store/rocks_store.h"

#include <algorithm>
#include <map>

#include "store/garbage_collector.h"
#include "store/keys.h"
#include "store/kill_point.h"
#include "store/messages.h"
#include "store/rocksdb_status.h"
#include "store/schema.h"
#include "store/snapshot_drop.h"

namespace trainsnap::internal {

namespace {

// A commit with retention on gives space back (compacts packs) once the
// chunk bytes it deleted since the last time exceed this fraction of the
// live chunk bytes.
constexpr double kMaxGarbageRatio = 0.25;

}  // namespace

Result<SnapshotInfo> RocksStore::CommitSnapshot(SnapshotCommit commit, uint64_t* metadata_bytes) {
  SnapshotInfo info = commit.info;
  const std::string context = "commit " + StepName(info.step);
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable("commit"));
  MutexLock lock(&commit_mu_);
  TRAINSNAP_RETURN_IF_ERROR(session_->PrepareWrite());
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  if (session_->txn_db() == nullptr) {
    return session_->recovery_error().WithContext("store reopened read-only after a failed write");
  }
  // One atomic WriteBatch through the OptimisticTransactionDB. Not an
  // OptimisticTransaction: commits are serialized by commit_mu_ in the only
  // writer process, so there is nothing to validate, and its validation
  // fails spuriously (TryAgain) when a memtable flush (e.g. forced by the
  // WAL bound) happens between the transaction's begin and its commit.
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  rocksdb::WriteBatch batch;
  // The chunks' bytes become durable before the batch that indexes them.
  TRAINSNAP_RETURN_IF_ERROR(chunks_->IndexForCommit(commit.chunks, context, &batch));
  TRAINSNAP_RETURN_IF_ERROR(CheckRetentionKeeps(info.step));
  StoreCountsData counts;
  TRAINSNAP_RETURN_IF_ERROR(catalog_->AddSnapshot(commit, &batch, &info, &counts, metadata_bytes));
  TRAINSNAP_KILL_POINT(kKillBeforeCommit);
  TRAINSNAP_RETURN_IF_ERROR(session_->WriteWithRecovery(&batch, wo, "commit", &view_lock));
  catalog_->ResetTensorCache();  // a replaced step's records changed
  chunks_->NoteIndexed(commit.chunks);
  // Committed: a failure to record it in the commit log is reported, but the
  // snapshot stays (like a commit whose WAL sync failed after the append).
  TRAINSNAP_RETURN_IF_ERROR(catalog_->NoteTransaction(counts).WithContext(context));
  chunks_->delta_bases().Publish(std::move(*commit.delta_bases));
  TRAINSNAP_KILL_POINT(kKillAfterCommit);

  // The snapshot is committed whatever happens below: a failed prune, flush
  // or reclaim is retried after a later commit, and must not report the
  // commit failed.
  bool flushed = false;
  // Retention collects garbage: not while a loss is unacknowledged.
  if (options_.retention.keep_last > 0 && !catalog_->lost_commits()) {
    auto pruned = GarbageCollector(*session_, *catalog_, *chunks_)
                      .Prune(options_.retention, /*full_gc=*/false, options_.sync, info.step);
    flushed = ReclaimWhenDue(pruned.ok() ? pruned->gc.bytes_deleted : 0, nullptr);
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
    static_cast<void>(session_->CheckWrite(session_->db()->Flush(flush, session_->handles()), "flush"));
  }
  if (!reserve_.present()) reserve_.Restore();
  return info;
}

bool RocksStore::ReclaimWhenDue(uint64_t deleted, GcReport* report) {
  deleted_since_reclaim_ += deleted;
  // Bounded garbage: compaction keeps the packs near the live bytes.
  if (deleted_since_reclaim_ == 0 ||
      static_cast<double>(deleted_since_reclaim_) <
          kMaxGarbageRatio * static_cast<double>(chunks_->live_pack_bytes())) {
    return false;
  }
  static_cast<void>(ReclaimSpace(report, IndexTidy::kInBackground));
  return true;
}

Result<PruneReport> RocksStore::DropSnapshots(const std::vector<int64_t>& steps) {
  const std::string context = "delete snapshots in " + path();
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable(context));
  // Collecting garbage waits for an acknowledged loss (CollectGarbage's rule).
  TRAINSNAP_RETURN_IF_ERROR(catalog_->CheckNoLostCommits(context));
  MutexLock lock(&commit_mu_);
  TRAINSNAP_RETURN_IF_ERROR(session_->PrepareWrite().WithContext(context));
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  // No second try with the reserve's space: a failure after the steps'
  // batch would find them gone and collect nothing, leaving their chunks
  // behind. The caller falls back to Delete and CollectGarbage, which use
  // the reserve.
  Result<PruneReport> report = GarbageCollector(*session_, *catalog_, *chunks_).DeleteAndCollect(steps, options_.sync);
  if (!report.ok()) return report.status().WithContext(context);
  ReclaimWhenDue(report->gc.bytes_deleted, &report->gc);
  return report;
}

Status RocksStore::CheckRetentionKeeps(int64_t step) {
  if (options_.retention.keep_last <= 0) return Status::OK();
  std::unique_ptr<rocksdb::Iterator> it(
      session_->db()->NewIterator(rocksdb::ReadOptions(), session_->cf(ColumnFamily::kSnapshots)));
  it->SeekToLast();
  if (!it->Valid()) return FromRocks(it->status(), "latest snapshot");
  TRAINSNAP_ASSIGN_OR_RETURN(int64_t latest, DecodeStepKey(std::string_view(it->key().data(), it->key().size())));
  if (step >= latest) return Status::OK();
  // Retention keeps the highest steps, and Latest() is the highest step: a
  // snapshot committed below it would be pruned as soon as keep_last higher
  // ones exist, and would never be the one RestoreLatest returns. A run that
  // resumed from an older step must drop the abandoned later snapshots first.
  return Status::InvalidArgument("below the latest stored " + StepName(latest) +
                                 ": retention (keep_last = " + std::to_string(options_.retention.keep_last) +
                                 ") keeps the highest steps and RestoreLatest returns the highest; "
                                 "Rollback to the step the run resumed from first, or keep steps increasing");
}

Status RocksStore::WithReserve(const std::function<Status()>& attempt) {
  reserve_.UseIfFull();
  // A failed delete changed nothing: with the reserve's space, try again.
  Status s = attempt();
  if (s.code() == StatusCode::kNoSpace && reserve_.Release()) s = attempt();
  return s;
}

Status RocksStore::DeleteChosenSteps(int64_t step, const std::string& context,
                                     const std::function<Result<std::vector<int64_t>>()>& pick) {
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable(context));
  MutexLock lock(&commit_mu_);
  return WithReserve([&]() -> Status {
    TRAINSNAP_RETURN_IF_ERROR(session_->PrepareWrite().WithContext(context));
    std::shared_lock<std::shared_mutex> view_lock;
    TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
    TRAINSNAP_RETURN_IF_ERROR(catalog_->CheckStored(step).WithContext(context));
    auto steps = pick();
    if (!steps.ok()) return steps.status().WithContext(context);
    if (steps->empty()) return Status::OK();
    return catalog_->DeleteSteps(*steps, options_.sync, nullptr).WithContext(context);
  });
}

Status RocksStore::Delete(int64_t step) {
  return DeleteChosenSteps(step, "delete " + StepName(step),
                           [&]() -> Result<std::vector<int64_t>> { return std::vector<int64_t>{step}; });
}

Status RocksStore::Rollback(int64_t step) {
  // Every stored step after `step`.
  return DeleteChosenSteps(step, "rollback to " + StepName(step), [&]() -> Result<std::vector<int64_t>> {
    TRAINSNAP_ASSIGN_OR_RETURN(std::vector<int64_t> steps, catalog_->ListSteps());
    std::vector<int64_t> later;
    for (int64_t s : steps) {
      if (s > step) later.push_back(s);
    }
    return later;
  });
}

Result<GcReport> RocksStore::CollectGarbage(const ProgressFn& progress) {
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable("collect garbage"));
  TRAINSNAP_RETURN_IF_ERROR(catalog_->CheckNoLostCommits("collect garbage in " + path()));
  MutexLock lock(&commit_mu_);
  reserve_.UseIfFull();
  std::shared_lock<std::shared_mutex> view_lock;
  auto attempt = [&]() -> Result<GcReport> {
    TRAINSNAP_RETURN_IF_ERROR(session_->PrepareWrite().WithContext("collect garbage"));
    TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
    return GarbageCollector(*session_, *catalog_, *chunks_).Collect(progress);
  };
  // What a failed collection deleted was garbage: collecting again is safe.
  auto report = attempt();
  if (!report.ok() && report.status().code() == StatusCode::kNoSpace && reserve_.Release()) {
    if (view_lock.owns_lock()) view_lock.unlock();
    report = attempt();
  }
  if (report.ok()) {
    Status s = GiveSpaceBack(&view_lock, &*report);
    if (s.ok()) s = GarbageCollector(*session_, *catalog_, *chunks_).NameDamagedSteps(&*report);
    if (!s.ok()) report = s;
  }
  if (!report.ok()) return report.status().WithContext("collect garbage in " + path());
  return report;
}

Result<PruneReport> RocksStore::Prune(const RetentionPolicy& policy) {
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable("prune"));
  if (policy.keep_last < 0 || policy.keep_every < 0) {
    return Status::InvalidArgument("prune: retention counts must be >= 0");
  }
  TRAINSNAP_RETURN_IF_ERROR(catalog_->CheckNoLostCommits("prune " + path()));
  MutexLock lock(&commit_mu_);
  reserve_.UseIfFull();
  TRAINSNAP_RETURN_IF_ERROR(session_->PrepareWrite().WithContext("prune"));
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  GarbageCollector collector(*session_, *catalog_, *chunks_);
  auto report = collector.Prune(policy, /*full_gc=*/true, options_.sync);
  if (report.ok()) {
    Status s = GiveSpaceBack(&view_lock, &report->gc);
    if (s.ok()) s = collector.NameDamagedSteps(&report->gc);
    if (!s.ok()) report = s;
  }
  if (!report.ok()) return report.status().WithContext("prune " + path());
  return report;
}

Result<RepairReport> RocksStore::Repair() {
  const std::string context = "repair " + path();
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable(context));
  MutexLock lock(&commit_mu_);
  TRAINSNAP_RETURN_IF_ERROR(session_->PrepareWrite().WithContext(context));
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  if (session_->txn_db() == nullptr) {
    return session_->recovery_error().WithContext(context + ": store reopened read-only");
  }
  return catalog_->DeleteLeftovers(options_.sync);
}

Status RocksStore::AcknowledgeLostCommits() {
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable("acknowledge lost commits"));
  MutexLock lock(&commit_mu_);
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  return catalog_->AcknowledgeLoss();
}

Status RocksStore::ReclaimSpace(GcReport* report, IndexTidy tidy) {
  // The packs first: removing packs without live chunks needs no space,
  // which a full disk lacks.
  TRAINSNAP_RETURN_IF_ERROR(chunks_->CompactPacks(report));
  deleted_since_reclaim_ = 0;
  // Flushing lets the WAL files that hold deleted index entries go; compacting
  // the index drops their tombstones. Both small, but each writes and syncs
  // an SST and the MANIFEST: on retention's path, where every rank of a run
  // reclaims at the same step on one disk, they were half of a drop's time.
  rocksdb::FlushOptions flush;
  flush.allow_write_stall = true;
  flush.wait = tidy == IndexTidy::kNow;
  TRAINSNAP_RETURN_IF_ERROR(session_->CheckWrite(session_->db()->Flush(flush, session_->handles()), "flush"));
  if (tidy == IndexTidy::kInBackground) return Status::OK();
  rocksdb::CompactRangeOptions compact;
  compact.allow_write_stall = true;
  return session_->CheckWrite(
      session_->db()->CompactRange(compact, session_->cf(ColumnFamily::kChunks), nullptr, nullptr),
      "compact the chunk index");
}

Status RocksStore::GiveSpaceBack(std::shared_lock<std::shared_mutex>* view_lock, GcReport* report) {
  Status s = ReclaimSpace(report, IndexTidy::kNow);
  if (s.code() == StatusCode::kNoSpace) {
    // The failed flush or compaction stopped the database's writes: reopen
    // and try once more, with the reserve's space when one is left. Without
    // one the second try still gets what the reopen frees: closing waits for
    // RocksDB's background jobs and opening purges the files they left
    // obsolete (the first try failed now and then under load, when the
    // files freed by the previous delete were not yet gone).
    reserve_.Release();
    view_lock->unlock();
    s = session_->PrepareWrite();
    if (s.ok()) s = session_->AcquireView(view_lock);
    if (s.ok() && session_->txn_db() == nullptr) s = session_->recovery_error();
    if (s.ok()) s = ReclaimSpace(report, IndexTidy::kNow);
  }
  reserve_.Restore();
  return s.WithContext("give space back");
}

Result<PruneReport> DropSnapshots(Store& store, const std::vector<int64_t>& steps) {
  if (auto* rocks = dynamic_cast<RocksStore*>(&store)) return rocks->DropSnapshots(steps);
  return Status::NotSupported("delete snapshots in " + store.path() + ": not a store Store::Open made");
}

}  // namespace trainsnap::internal
