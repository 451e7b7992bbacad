// Writing: chunks (PutChunk) and the atomic commit of a snapshot.
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"

#include "store.pb.h"
#include "store/chunk_codec.h"
#include "store/keys.h"
#include "store/kill_point.h"
#include "store/rocksdb_status.h"
#include "store/snapshot_writer.h"

namespace trainsnap::internal {

// --- writing -------------------------------------------------------------------

Result<std::unique_ptr<SnapshotWriter>> RocksStore::BeginSnapshot(int64_t step, const SnapshotOptions& options) {
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable("begin snapshot " + StepName(step)));
  return std::unique_ptr<SnapshotWriter>(new SnapshotWriterImpl(static_cast<ChunkSink*>(this), step, options));
}

Result<std::optional<uint64_t>> RocksStore::LookupChunk(const ChunkHash& hash) {
  // Indexed, but its bytes are lost: as good as absent, so that the writer
  // stores the bytes again (its commit indexes the new copy).
  if (registry_.Unusable(hash)) return std::optional<uint64_t>();
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), chunks_cf_, EncodeChunkKey(hash), &value);
  if (s.IsNotFound()) return std::optional<uint64_t>();
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "look up chunk " + hash.Hex()));
  auto entry = ParsePackEntry(std::string_view(value.data(), value.size()));
  if (!entry.ok()) return entry.status().WithContext("look up chunk " + hash.Hex());
  registry_.NoteStored(hash, entry->length);
  return std::optional<uint64_t>(entry->length);
}

Result<PackEntry> RocksStore::PutChunk(const ChunkHash& hash, const std::string& encoded) {
  const std::string context = "write chunk " + hash.Hex();
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable(context));
  auto header = ParseChunkHeader(encoded);
  if (!header.ok()) return header.status().WithContext(context);
  const bool raw = header->codec == ChunkCodec::kRaw && header->filter == ChunkFilter::kNone;
  auto entry = packs_->Append(encoded, header->raw_bytes, raw);
  if (!entry.ok()) return entry.status().WithContext(context);
  return *entry;
}

bool RocksStore::MayDelta(const DeltaBase& bases, size_t index) const {
  if (delta_reference_ == DeltaReference::kKeyframe) {
    // Against the keyframe, until the keyframe interval is reached.
    return bases.depths[index] == 0 && static_cast<int>(bases.ages[index]) + 1 < keyframe_interval_;
  }
  // Against the previous version, while the chain stays below the interval.
  return bases.depths[index] != kUnknownDeltaDepth && static_cast<int>(bases.depths[index]) + 1 < keyframe_interval_;
}

uint32_t RocksStore::AcquireWriterFloor() {
  MutexLock lock(&floors_mu_);
  const uint32_t floor = packs_->NextAppendPack();
  writer_floors_.insert(floor);
  return floor;
}

void RocksStore::ReleaseWriterFloor(uint32_t floor) {
  MutexLock lock(&floors_mu_);
  auto it = writer_floors_.find(floor);
  if (it != writer_floors_.end()) writer_floors_.erase(it);
}

Result<SnapshotInfo> RocksStore::CommitSnapshot(SnapshotCommit commit, uint64_t* metadata_bytes) {
  SnapshotInfo info = commit.info;
  const std::vector<const TensorRecord*>& records = commit.records;
  const std::vector<RecordGroupRef>* groups = commit.groups ? &*commit.groups : nullptr;
  const std::string& manifest = commit.manifest;
  const bool replace_existing = commit.replace_existing;
  const std::vector<NewChunk>& chunks = commit.chunks;
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable("commit"));
  MutexLock lock(&commit_mu_);
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
  // The chunks' bytes become durable before the batch that references them.
  if (!chunks.empty()) {
    TRAINSNAP_RETURN_IF_ERROR(packs_->Sync().WithContext("commit " + StepName(info.step) + ": sync pack files"));
    for (const NewChunk& c : chunks) {
      if (!packs_->IsDurable(c.entry)) {
        return Status::Aborted("commit " + StepName(info.step) + ": chunk " + c.hash.Hex() + " is in " +
                               PackFileName(c.entry.pack) +
                               ", which a failed write or sync retired before it was durable; capture again");
      }
    }
  }
  rocksdb::WriteBatch batch;
  for (const NewChunk& c : chunks) {
    const std::string key = EncodeChunkKey(c.hash);
    if (c.base) {
      if (chunk_deps_cf_ == nullptr) return Status::Aborted("commit: no chunk_deps CF");
      TRAINSNAP_RETURN_IF_ERROR(
          FromRocks(batch.Put(chunk_deps_cf_, key, EncodeChunkKey(*c.base)), "write chunk dependency"));
    } else if (chunk_deps_cf_ != nullptr && registry_.Unusable(c.hash)) {
      // A lost delta chunk written again whole: it no longer needs its base.
      TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Delete(chunk_deps_cf_, key), "delete chunk dependency"));
    }
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Put(chunks_cf_, key, EncodePackEntry(c.entry)), "write chunk index entry"));
  }
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
    for (const TensorRecord* record : records) {
      const TensorRecord& r = *record;
      const std::string key = EncodeTensorKey(info.step, r.param_id, r.role);
      const std::string value = SerializeTensorRecord(r);
      written += key.size() + value.size();
      TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Put(tensors_cf_, key, value), "write tensor record"));
    }
  }
  info.manifest_bytes = manifest.size() + commit.shared.inline_bytes.size();
  const std::string record = SerializeSnapshotRecord(info, manifest, groups, &commit.shared);
  written += step_key.size() + record.size();
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Put(snapshots_cf_, step_key, record), "write snapshot record"));
  TRAINSNAP_KILL_POINT(kKillBeforeCommit);
  TRAINSNAP_RETURN_IF_ERROR(WriteWithRecovery(&batch, wo, "commit", &view_lock));
  ResetTensorCache();  // a replaced step's records changed
  for (const NewChunk& c : chunks) registry_.NoteIndexed(c.hash, c.entry.length);
  *metadata_bytes = written;
  // Committed: a failure to record it in the commit log is reported, but the
  // snapshot stays (like a commit whose WAL sync failed after the append).
  TRAINSNAP_RETURN_IF_ERROR(NoteTransaction(counts).WithContext("commit " + StepName(info.step)));
  delta_bases_.Publish(std::move(*commit.delta_bases));
  TRAINSNAP_KILL_POINT(kKillAfterCommit);

  // The snapshot is committed whatever happens below: a failed prune, flush
  // or reclaim is retried after a later commit, and must not report the
  // commit failed.
  bool flushed = false;
  // Retention collects garbage: not while a loss is unacknowledged.
  if (retention_.keep_last > 0 && !lost_commits()) {
    auto pruned = PruneLocked(retention_, /*full_gc=*/false, info.step);
    if (pruned.ok()) deleted_since_reclaim_ += pruned->gc.bytes_deleted;
    // Bounded garbage: compaction keeps the packs near the live bytes.
    if (deleted_since_reclaim_ > 0 &&
        static_cast<double>(deleted_since_reclaim_) >= kMaxGarbageRatio * static_cast<double>(live_pack_bytes_)) {
      static_cast<void>(ReclaimSpace(nullptr));
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
