// Writing: chunks (PutChunk) and the atomic commit of a snapshot.
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"

#include "store.pb.h"
#include "store/keys.h"
#include "store/kill_point.h"
#include "store/rocksdb_status.h"
#include "store/snapshot_writer.h"

namespace trainsnap::internal {

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
  TRAINSNAP_RETURN_IF_ERROR(PrepareWrite());
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  // Another thread's recovery may have failed since PrepareWrite.
  if (txn_db_ == nullptr) return recovery_error_.WithContext(context + ": store reopened read-only");
  rocksdb::WriteBatch batch;
  if (base != nullptr) {
    if (chunk_deps_cf_ == nullptr) return Status::Aborted(context + ": no chunk_deps CF");
    // The dependency first in the same batch: GC never sees the delta without it.
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Put(chunk_deps_cf_, EncodeChunkKey(hash), EncodeChunkKey(*base)),
                                        "write chunk dependency"));
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Put(chunks_cf_, EncodeChunkKey(hash), encoded), "write chunk"));
  // WAL on, not synced: the commit's synced write covers it. Idempotent
  // (content-addressed), so a retry after recovery is safe.
  return WriteWithRecovery(&batch, rocksdb::WriteOptions(), context, &view_lock);
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
    TRAINSNAP_RETURN_IF_ERROR(
        ScanTensorRecords(info.step, rocksdb::ReadOptions(), [&](std::string_view key, std::string_view) {
          return FromRocks(batch.Delete(tensors_cf_, rocksdb::Slice(key.data(), key.size())),
                           "delete old tensor record");
        }).WithContext("replace " + StepName(info.step)));
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
  TRAINSNAP_RETURN_IF_ERROR(WriteWithRecovery(&batch, wo, "commit", &view_lock));
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

}  // namespace trainsnap::internal
