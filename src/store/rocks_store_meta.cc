// The meta record (format version, chunk size, hash), the counts record and
// the commit log: what a store is and whether commits were lost.
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"

#include "store.pb.h"
#include "store/keys.h"
#include "store/pack_entry.h"
#include "store/rocksdb_status.h"

namespace trainsnap::internal {

Status CheckMeta(const proto::StoreMeta& meta, const StoreOptions& options) {
  if (meta.format_version() != kMetaFormatVersion) {
    return Status::NotSupported("store format version " + std::to_string(meta.format_version()) +
                                " is not supported (this build reads version " + std::to_string(kMetaFormatVersion) +
                                (meta.format_version() < kMetaFormatVersion
                                     ? ": chunks in pack files, shared manifests; stores of versions 1.." +
                                           std::to_string(kMetaFormatVersion - 1) + " are not converted)"
                                     : ")"));
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

uint64_t StoredBytes(std::string_view index_value) {
  auto entry = ParsePackEntry(index_value);
  return entry.ok() ? entry->length : 0;
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
    MutexLock lock(&lost_mu_);
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
  MutexLock lock(&lost_mu_);
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
  MutexLock lock(&commit_mu_);
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  if (!lost_commits()) return Status::OK();
  auto counts = ReadCounts(nullptr);
  if (!counts.ok()) return counts.status().WithContext("acknowledge lost commits");
  CommitLogState state{(*counts)->transactions, (*counts)->newest_step, std::nullopt};
  TRAINSNAP_RETURN_IF_ERROR(commit_log_->Write(state).WithContext("acknowledge lost commits"));
  MutexLock lost_lock(&lost_mu_);
  lost_.reset();
  return Status::OK();
}

}  // namespace trainsnap::internal
