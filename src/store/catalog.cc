#include "store/catalog.h"

#include <chrono>

#include <rocksdb/snapshot.h>

#include "store.pb.h"
#include "store/keys.h"
#include "store/messages.h"
#include "store/pack_entry.h"
#include "store/rocksdb_status.h"

namespace trainsnap::internal {

namespace {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Status CheckMeta(const proto::StoreMeta& meta, const StoreOptions& options) {
  if (meta.format_version() < kMinReadableFormatVersion || meta.format_version() > kMetaFormatVersion) {
    return Status::NotSupported(
        "store format version " + std::to_string(meta.format_version()) + " is not supported (this build reads versions " +
        std::to_string(kMinReadableFormatVersion) + ".." + std::to_string(kMetaFormatVersion) +
        (meta.format_version() < kMinReadableFormatVersion
             ? ": chunks in pack files, shared manifests; stores of versions 1.." +
                   std::to_string(kMinReadableFormatVersion - 1) + " are not converted)"
             : "; it was written by a newer build)"));
  }
  if (meta.hash() != kHashName) {
    return Status::NotSupported("store uses chunk hash \"" + meta.hash() + "\"; this build supports " + kHashName);
  }
  if (meta.chunk_bytes() == 0) return Status::Corruption("meta record: chunk_bytes is 0");
  if (options.chunk_bytes != 0 && options.chunk_bytes != meta.chunk_bytes()) {
    return Status::InvalidArgument("chunk_bytes " + std::to_string(options.chunk_bytes) +
                                   " differs from the store's fixed chunk_bytes " + std::to_string(meta.chunk_bytes()));
  }
  return Status::OK();
}
std::string DescribeLoss(const LostCommits& loss) {
  return "committed snapshots were lost: the commit log records " + std::to_string(loss.recorded) +
         " write transactions (newest " + OptionalStep(loss.newest_recorded) + "), the database holds " +
         std::to_string(loss.found) + " (newest " + OptionalStep(loss.newest_found) +
         "); its write-ahead log was damaged, cut or deleted";
}

Status Catalog::LoadOrCreateMeta(const StoreOptions& options) {
  std::string value;
  rocksdb::Status s = db()->Get(rocksdb::ReadOptions(), cf(ColumnFamily::kMeta), kMetaStoreKey, &value);
  if (s.IsNotFound()) {
    std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(rocksdb::ReadOptions(), cf(ColumnFamily::kSnapshots)));
    it->SeekToFirst();
    if (it->Valid()) return Status::Corruption("the store holds snapshots but no meta record");
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan snapshot records"));
    if (session_.read_only()) return Status::NotFound("not a trainsnap store (no meta record)");
    proto::StoreMeta meta;
    meta.set_format_version(kMetaFormatVersion);
    meta.set_chunk_bytes(options.chunk_bytes ? options.chunk_bytes : kDefaultChunkBytes);
    meta.set_hash(kHashName);
    meta.set_created_unix_ms(NowUnixMs());
    rocksdb::WriteBatch batch;
    TRAINSNAP_RETURN_IF_ERROR(
        FromRocks(batch.Put(cf(ColumnFamily::kMeta), kMetaStoreKey, meta.SerializeAsString()), "meta"));
    TRAINSNAP_RETURN_IF_ERROR(
        FromRocks(batch.Put(cf(ColumnFamily::kMeta), kCountsKey, SerializeStoreCounts({})), "counts"));
    rocksdb::WriteOptions wo;
    wo.sync = true;
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(db()->Write(wo, &batch), "write meta record"));
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

Status Catalog::UpgradeMeta() {
  if (session_.read_only() || format_version_ >= kMetaFormatVersion) return Status::OK();
  std::string value;
  TRAINSNAP_RETURN_IF_ERROR(
      FromRocks(db()->Get(rocksdb::ReadOptions(), cf(ColumnFamily::kMeta), kMetaStoreKey, &value), "read meta record"));
  proto::StoreMeta meta;
  if (!meta.ParseFromString(value)) return Status::Corruption("meta record does not parse");
  meta.set_format_version(kMetaFormatVersion);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(
      db()->Put(wo, cf(ColumnFamily::kMeta), kMetaStoreKey, meta.SerializeAsString()), "upgrade the meta record"));
  upgraded_from_ = format_version_;
  format_version_ = kMetaFormatVersion;
  return Status::OK();
}

Result<std::optional<StoreCountsData>> Catalog::ReadCounts(const rocksdb::Snapshot* at) {
  if (format_version_ < kCountsFormatVersion) return std::optional<StoreCountsData>();
  rocksdb::ReadOptions ro;
  ro.snapshot = at;
  std::string value;
  rocksdb::Status s = db()->Get(ro, cf(ColumnFamily::kMeta), kCountsKey, &value);
  if (s.IsNotFound()) return Status::Corruption("the counts record is missing");
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "read the counts record"));
  TRAINSNAP_ASSIGN_OR_RETURN(StoreCountsData counts, ParseStoreCounts(value));
  return std::optional<StoreCountsData>(counts);
}

Status Catalog::CheckListed(const rocksdb::Snapshot* at, std::optional<uint64_t> found, std::optional<int64_t> newest) {
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

Status Catalog::PutCounts(rocksdb::WriteBatch* batch, const StoreCountsData& counts) {
  return FromRocks(batch->Put(cf(ColumnFamily::kMeta), kCountsKey, SerializeStoreCounts(counts)),
                   "write the counts record");
}

Status Catalog::CheckCommitLog(const std::optional<CommitLogState>& log, bool sync) {
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
  if (session_.read_only()) return Status::OK();
  // The log restarts from what the database holds, the loss kept in it.
  CommitLogState state{counts->transactions, counts->newest_step, loss};
  auto opened = CommitLog::Open(session_.path(), sync, state);
  if (!opened.ok()) return opened.status();
  commit_log_ = std::move(*opened);
  return Status::OK();
}

Status Catalog::NoteTransaction(const StoreCountsData& counts) {
  if (!commit_log_) return Status::OK();
  CommitLogState state{counts.transactions, counts.newest_step, lost_commits()};
  return commit_log_->Write(state).WithContext("record the transaction in the commit log");
}

std::optional<LostCommits> Catalog::lost_commits() {
  MutexLock lock(&lost_mu_);
  return lost_;
}

Status Catalog::CheckNoLostCommits(std::string_view what) {
  std::optional<LostCommits> loss = lost_commits();
  if (!loss) return Status::OK();
  return Status::Corruption(std::string(what) + ": " + DescribeLoss(*loss) +
                            "; garbage collection would make the loss permanent: acknowledge it first "
                            "(Store::AcknowledgeLostCommits, `trainsnap verify --acknowledge-loss`)");
}

Result<std::optional<SnapshotRecordData>> Catalog::ReadSnapshotRecord(int64_t step, const rocksdb::ReadOptions& ro) {
  std::string value;
  rocksdb::Status s = db()->Get(ro, cf(ColumnFamily::kSnapshots), EncodeStepKey(step), &value);
  if (s.IsNotFound()) return std::optional<SnapshotRecordData>();
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "read snapshot record"));
  TRAINSNAP_ASSIGN_OR_RETURN(SnapshotRecordData data, ParseSnapshotRecord(value, step));
  return std::optional<SnapshotRecordData>(std::move(data));
}

Result<std::vector<int64_t>> Catalog::ListSteps(const rocksdb::Snapshot* at, bool check_counts) {
  std::optional<rocksdb::ManagedSnapshot> own;
  if (at == nullptr) at = own.emplace(db()).snapshot();
  rocksdb::ReadOptions ro;
  ro.snapshot = at;
  std::vector<int64_t> steps;
  std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(ro, cf(ColumnFamily::kSnapshots)));
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

Result<std::vector<SnapshotInfo>> Catalog::ListInView(const rocksdb::Snapshot* at) {
  // The count is read at the same RocksDB snapshot as the records: a
  // table-file read that made the scan skip records without an error
  // (docs/reliability.md) is Corruption, not a shorter list.
  std::optional<rocksdb::ManagedSnapshot> own;
  if (at == nullptr) at = own.emplace(db()).snapshot();
  std::vector<SnapshotInfo> out;
  rocksdb::ReadOptions options;
  options.snapshot = at;
  std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(options, cf(ColumnFamily::kSnapshots)));
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

Result<std::optional<int64_t>> Catalog::Latest() {
  rocksdb::ManagedSnapshot at(db());
  rocksdb::ReadOptions ro;
  ro.snapshot = at.snapshot();
  std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(ro, cf(ColumnFamily::kSnapshots)));
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

Result<SnapshotInfo> Catalog::Info(int64_t step) {
  auto data = ReadSnapshotRecord(step);
  if (!data.ok()) return data.status().WithContext(StepName(step));
  if (!data->has_value()) return Status::NotFound("no snapshot at " + StepName(step));
  return (*data)->info;
}

Result<bool> Catalog::Contains(int64_t step) {
  // Pinned, not copied, and not parsed: at 50,000 parameters the record
  // lists some 600 record groups, and parsing them (a few allocations each,
  // from a heap the optimizer step has just fragmented) was a tenth of a
  // capture's stall (to scale linearly with the tensor count).
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db()->Get(rocksdb::ReadOptions(), cf(ColumnFamily::kSnapshots), EncodeStepKey(step), &value);
  if (s.IsNotFound()) return false;
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "read snapshot record").WithContext(StepName(step)));
  return true;
}

Result<std::string> Catalog::Manifest(int64_t step) {
  auto data = ReadSnapshotRecord(step);
  if (!data.ok()) return data.status().WithContext(StepName(step));
  if (!data->has_value()) return Status::NotFound("no snapshot at " + StepName(step));
  return std::move((*data)->manifest);
}

Result<std::vector<TensorRecord>> Catalog::Tensors(int64_t step) {
  // Read the snapshot record and its tensors from one consistent view.
  rocksdb::ManagedSnapshot at(db());
  rocksdb::ReadOptions ro;
  ro.snapshot = at.snapshot();
  auto data = ReadSnapshotRecord(step, ro);
  if (!data.ok()) return data.status().WithContext(StepName(step));
  if (!data->has_value()) return Status::NotFound("no snapshot at " + StepName(step));
  return SnapshotTensors(**data, ro);
}

Result<std::string> Catalog::SharedManifest(int64_t step) {
  rocksdb::ManagedSnapshot at(db());
  rocksdb::ReadOptions ro;
  ro.snapshot = at.snapshot();
  auto data = ReadSnapshotRecord(step, ro);
  if (!data.ok()) return data.status().WithContext(StepName(step));
  if (!data->has_value()) return Status::NotFound("no snapshot at " + StepName(step));
  auto shared = ReadSharedManifest(**data, ro);
  if (!shared.ok()) return shared.status().WithContext(StepName(step));
  return shared;
}

Result<std::string> Catalog::ReadSharedManifest(const SnapshotRecordData& data, const rocksdb::ReadOptions& ro) {
  if (!data.shared.chunk) return data.shared.inline_bytes;
  return chunks_.ReadMetadataChunk(*data.shared.chunk, "shared manifest " + data.shared.chunk->hash.Hex(), ro);
}

Result<std::vector<TensorRecord>> Catalog::ReadRecordGroup(const RecordGroupRef& group,
                                                           const rocksdb::ReadOptions& ro) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::string raw,
                             chunks_.ReadMetadataChunk(group.chunk, "record group " + group.chunk.hash.Hex(), ro));
  return ParseRecordGroup(raw, group);
}

Result<std::vector<TensorRecord>> Catalog::SnapshotTensors(const SnapshotRecordData& data,
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
  Status scanned = ScanTensorRecords(step, base_ro, [&](std::string_view key_bytes, std::string_view value) {
    auto key = DecodeTensorKey(key_bytes);
    if (!key.ok()) return key.status().WithContext(StepName(step));
    auto record = ParseTensorRecord(value, key->param_id, key->role);
    if (!record.ok()) {
      return record.status().WithContext(StepName(step) + ": tensor param_id " + ParamIdHex(key->param_id) + " role " +
                                         key->role);
    }
    out.push_back(std::move(*record));
    return Status::OK();
  });
  TRAINSNAP_RETURN_IF_ERROR(scanned.WithContext(StepName(step) + ": read tensor records"));
  return out;
}

Status Catalog::ScanTensorRecords(int64_t step, const rocksdb::ReadOptions& base_ro, const RecordVisitor& visit) {
  rocksdb::ReadOptions ro = base_ro;
  const std::string prefix = TensorKeyPrefix(step);
  const std::string upper = PrefixUpperBound(prefix);
  rocksdb::Slice upper_slice(upper);
  if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(ro, cf(ColumnFamily::kTensors)));
  for (it->Seek(prefix); it->Valid(); it->Next()) {
    TRAINSNAP_RETURN_IF_ERROR(visit(std::string_view(it->key().data(), it->key().size()),
                                    std::string_view(it->value().data(), it->value().size())));
  }
  return FromRocks(it->status(), "scan tensor records");
}

Result<TensorRecord> Catalog::Tensor(int64_t step, uint64_t param_id, std::string_view role) {
  TRAINSNAP_ASSIGN_OR_RETURN(TensorRecord record, CatalogTensor(step, param_id, role));
  if (chunks_.unusable() == 0) return record;
  // A capture that reused this record would reference bytes that are not
  // there: it must write the tensor again.
  for (size_t i = 0; i < record.chunks.size(); ++i) {
    if (!chunks_.Unusable(record.chunks[i].hash)) continue;
    return Status::Corruption(StepName(step) + ": tensor param_id " + ParamIdHex(param_id) + " role " +
                              std::string(role) + ": chunk " + std::to_string(i) + " " + record.chunks[i].hash.Hex() +
                              " is damaged (its pack file is missing or cut, or it fails its hash)");
  }
  return record;
}

Result<TensorRecord> Catalog::CatalogTensor(int64_t step, uint64_t param_id, std::string_view role) {
  const std::string name = StepName(step) + ": tensor param_id " + ParamIdHex(param_id) + " role " + std::string(role);
  uint64_t generation = 0;
  {
    MutexLock lock(&tensor_cache_mu_);
    generation = tensor_cache_generation_;
    if (tensor_cache_step_ == step) {
      auto found = tensor_cache_.find(std::make_pair(param_id, std::string(role)));
      if (found == tensor_cache_.end()) return Status::NotFound(name + ": not in the store");
      return found->second;
    }
  }
  rocksdb::ManagedSnapshot at(db());
  rocksdb::ReadOptions ro;
  ro.snapshot = at.snapshot();
  std::string value;
  rocksdb::Status s = db()->Get(ro, cf(ColumnFamily::kSnapshots), EncodeStepKey(step), &value);
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
    MutexLock lock(&tensor_cache_mu_);
    if (generation == tensor_cache_generation_) {
      tensor_cache_step_ = step;
      tensor_cache_ = std::move(by_key);
    }
    if (!out) return Status::NotFound(name + ": not in the store");
    return std::move(*out);
  }
  s = db()->Get(ro, cf(ColumnFamily::kTensors), EncodeTensorKey(step, param_id, role), &value);
  if (s.IsNotFound()) return Status::NotFound(name + ": not in the store");
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, name));
  auto record = ParseTensorRecord(value, param_id, std::string(role));
  if (!record.ok()) return record.status().WithContext(name);
  return record;
}

Status Catalog::AddSnapshot(const SnapshotCommit& commit, rocksdb::WriteBatch* batch, SnapshotInfo* info,
                            StoreCountsData* counts, uint64_t* record_bytes) {
  const std::vector<RecordGroupRef>* groups = commit.groups ? &*commit.groups : nullptr;
  const std::string step_key = EncodeStepKey(info->step);
  std::string existing;
  rocksdb::Status s = db()->Get(rocksdb::ReadOptions(), cf(ColumnFamily::kSnapshots), step_key, &existing);
  if (s.ok()) {
    if (!commit.replace_existing) return Status::AlreadyExists(StepName(info->step) + " is already stored");
    // Replacing: the old tensor records (format version 1) go in the same
    // transaction; the old record groups become garbage unless shared.
    TRAINSNAP_RETURN_IF_ERROR(
        ScanTensorRecords(info->step, rocksdb::ReadOptions(), [&](std::string_view key, std::string_view) {
          return FromRocks(batch->Delete(cf(ColumnFamily::kTensors), rocksdb::Slice(key.data(), key.size())),
                           "delete old tensor record");
        }).WithContext("replace " + StepName(info->step)));
  } else if (!s.IsNotFound()) {
    return FromRocks(s, "read snapshot record");
  }
  auto stored_counts = ReadCounts(nullptr);
  if (!stored_counts.ok()) return stored_counts.status().WithContext("commit");
  *counts = stored_counts->value_or(StoreCountsData());
  if (s.IsNotFound()) {
    ++counts->snapshots;
    counts->newest_step = counts->newest_step ? std::max(*counts->newest_step, info->step) : info->step;
  }
  ++counts->transactions;
  TRAINSNAP_RETURN_IF_ERROR(PutCounts(batch, *counts));
  uint64_t written = 0;
  if (groups == nullptr) {
    for (const TensorRecord* record : commit.records) {
      const TensorRecord& r = *record;
      const std::string key = EncodeTensorKey(info->step, r.param_id, r.role);
      const std::string value = SerializeTensorRecord(r);
      written += key.size() + value.size();
      TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch->Put(cf(ColumnFamily::kTensors), key, value), "write tensor record"));
    }
  }
  info->manifest_bytes = commit.manifest.size() + commit.shared.inline_bytes.size();
  const std::string record = SerializeSnapshotRecord(*info, commit.manifest, groups, &commit.shared);
  written += step_key.size() + record.size();
  TRAINSNAP_RETURN_IF_ERROR(
      FromRocks(batch->Put(cf(ColumnFamily::kSnapshots), step_key, record), "write snapshot record"));
  *record_bytes = written;
  return Status::OK();
}

Status Catalog::DeleteSteps(const std::vector<int64_t>& steps, bool sync, std::vector<ChunkRef>* released,
                            std::vector<int64_t>* deleted) {
  rocksdb::WriteBatch batch;
  TRAINSNAP_ASSIGN_OR_RETURN(std::optional<StoreCountsData> stored_counts, ReadCounts(nullptr));
  StoreCountsData counts = stored_counts.value_or(StoreCountsData());
  std::set<int64_t> gone;  // the steps of `steps` that are stored (each once)
  for (int64_t step : steps) {
    if (gone.count(step)) continue;
    std::string value;
    rocksdb::Status found =
        db()->Get(rocksdb::ReadOptions(), cf(ColumnFamily::kSnapshots), EncodeStepKey(step), &value);
    if (found.ok()) {
      gone.insert(step);
      // Only a hint for the incremental GC after retention, like the tensor
      // records below: a record or group that does not read releases nothing.
      auto data = ParseSnapshotRecord(value, step);
      if (released && data.ok() && data->shared.chunk) released->push_back(*data->shared.chunk);
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
  if (deleted) deleted->assign(gone.begin(), gone.end());
  if (gone.empty()) return Status::OK();
  if (gone.size() > counts.snapshots) {
    return Status::Corruption("the store records " + std::to_string(counts.snapshots) + " snapshots, fewer than the " +
                              std::to_string(gone.size()) + " to delete (run `trainsnap verify`)");
  }
  counts.snapshots -= gone.size();
  if (counts.newest_step && gone.count(*counts.newest_step)) {
    // The newest remaining step: the first stored key below, skipping the deleted.
    std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(rocksdb::ReadOptions(), cf(ColumnFamily::kSnapshots)));
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
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Delete(cf(ColumnFamily::kSnapshots), EncodeStepKey(step)), "delete"));
    Status scanned = ScanTensorRecords(step, rocksdb::ReadOptions(), [&](std::string_view key, std::string_view value) {
      if (released) {
        // Only a hint for the incremental GC after retention: a record that
        // does not parse just releases nothing (a full GC still finds them).
        auto record = ParseTensorRecord(value, 0, "");
        if (record.ok()) released->insert(released->end(), record->chunks.begin(), record->chunks.end());
      }
      return FromRocks(batch.Delete(cf(ColumnFamily::kTensors), rocksdb::Slice(key.data(), key.size())), "delete");
    });
    TRAINSNAP_RETURN_IF_ERROR(scanned.WithContext(StepName(step)));
  }
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  TRAINSNAP_RETURN_IF_ERROR(session_.CheckWrite(db()->Write(wo, &batch), "delete snapshots"));
  ResetTensorCache();
  return NoteTransaction(counts);
}

Status Catalog::CheckStored(int64_t step) {
  auto data = ReadSnapshotRecord(step);
  if (!data.ok()) return data.status();
  if (!data->has_value()) return Status::NotFound("no such snapshot");
  return Status::OK();
}

Status Catalog::FindLeftovers(const rocksdb::Snapshot* at, std::map<int64_t, uint64_t>* leftovers) {
  rocksdb::ReadOptions ro;
  ro.snapshot = at;
  std::map<int64_t, uint64_t> per_step;
  std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(ro, cf(ColumnFamily::kTensors)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    TRAINSNAP_ASSIGN_OR_RETURN(TensorKey key, DecodeTensorKey(std::string_view(it->key().data(), it->key().size())));
    ++per_step[key.step];
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan tensor records"));
  // A point look-up per step: a record that a scan skipped is still found.
  for (const auto& [step, records] : per_step) {
    std::string value;
    rocksdb::Status s = db()->Get(ro, cf(ColumnFamily::kSnapshots), EncodeStepKey(step), &value);
    if (s.IsNotFound()) {
      leftovers->emplace(step, records);
    } else if (!s.ok()) {
      return FromRocks(s, "read snapshot record of " + StepName(step));
    }
  }
  return Status::OK();
}

Status Catalog::AcknowledgeLoss() {
  if (!lost_commits()) return Status::OK();
  auto counts = ReadCounts(nullptr);
  if (!counts.ok()) return counts.status().WithContext("acknowledge lost commits");
  CommitLogState state{(*counts)->transactions, (*counts)->newest_step, std::nullopt};
  TRAINSNAP_RETURN_IF_ERROR(commit_log_->Write(state).WithContext("acknowledge lost commits"));
  MutexLock lost_lock(&lost_mu_);
  lost_.reset();
  return Status::OK();
}

Result<RepairReport> Catalog::DeleteLeftovers(bool sync) {
  const std::string context = "repair " + session_.path();
  rocksdb::ManagedSnapshot at(db());
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
    Status scanned = ScanTensorRecords(step, ro, [&](std::string_view key, std::string_view) {
      ++report.tensor_records;
      return FromRocks(batch.Delete(cf(ColumnFamily::kTensors), rocksdb::Slice(key.data(), key.size())),
                       "delete leftover tensor record");
    });
    TRAINSNAP_RETURN_IF_ERROR(scanned.WithContext(context + ": " + StepName(step)));
    report.steps.push_back(step);
  }
  ++counts.transactions;
  TRAINSNAP_RETURN_IF_ERROR(PutCounts(&batch, counts));
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  TRAINSNAP_RETURN_IF_ERROR(session_.CheckWrite(db()->Write(wo, &batch), context));
  TRAINSNAP_RETURN_IF_ERROR(NoteTransaction(counts).WithContext(context));
  return report;
}
void Catalog::ResetTensorCache() {
  MutexLock lock(&tensor_cache_mu_);
  ++tensor_cache_generation_;
  tensor_cache_step_.reset();
  tensor_cache_.clear();
}

}  // namespace trainsnap::internal
