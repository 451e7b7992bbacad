// Catalog reads: snapshot records, the list of steps and the tensor records
// of a snapshot (tensors CF or record groups).
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"

#include <rocksdb/snapshot.h>

#include "store/keys.h"
#include "store/rocksdb_status.h"

namespace trainsnap::internal {

// --- reading -------------------------------------------------------------------

Result<std::optional<SnapshotRecordData>> RocksStore::ReadSnapshotRecord(int64_t step,
                                                                          const rocksdb::ReadOptions& ro) {
  std::string value;
  rocksdb::Status s = db_->Get(ro, snapshots_cf_, EncodeStepKey(step), &value);
  if (s.IsNotFound()) return std::optional<SnapshotRecordData>();
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "read snapshot record"));
  TRAINSNAP_ASSIGN_OR_RETURN(SnapshotRecordData data, ParseSnapshotRecord(value, step));
  return std::optional<SnapshotRecordData>(std::move(data));
}

Result<std::vector<int64_t>> RocksStore::ListSteps(const rocksdb::Snapshot* at, bool check_counts) {
  std::optional<rocksdb::ManagedSnapshot> own;
  if (at == nullptr) at = own.emplace(db_).snapshot();
  rocksdb::ReadOptions ro;
  ro.snapshot = at;
  std::vector<int64_t> steps;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, snapshots_cf_));
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

Result<std::vector<SnapshotInfo>> RocksStore::List() {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  return ListInView();
}

Result<std::vector<SnapshotInfo>> RocksStore::ListInView(const rocksdb::Snapshot* at) {
  // The count is read at the same RocksDB snapshot as the records: a
  // table-file read that made the scan skip records without an error
  // (docs/reliability.md) is Corruption, not a shorter list.
  std::optional<rocksdb::ManagedSnapshot> own;
  if (at == nullptr) at = own.emplace(db_).snapshot();
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
  std::optional<int64_t> newest;
  if (!out.empty()) newest = out.back().step;
  TRAINSNAP_RETURN_IF_ERROR(CheckListed(at, out.size(), newest).WithContext("list snapshots"));
  return out;
}

Result<std::optional<int64_t>> RocksStore::Latest() {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  rocksdb::ManagedSnapshot at(db_);
  rocksdb::ReadOptions ro;
  ro.snapshot = at.snapshot();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, snapshots_cf_));
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

Result<SnapshotInfo> RocksStore::Info(int64_t step) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  auto data = ReadSnapshotRecord(step);
  if (!data.ok()) return data.status().WithContext(StepName(step));
  if (!data->has_value()) return Status::NotFound("no snapshot at " + StepName(step));
  return (*data)->info;
}

Result<bool> RocksStore::Contains(int64_t step) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  // Pinned, not copied, and not parsed: at 50,000 parameters the record
  // lists some 600 record groups, and parsing them (a few allocations each,
  // from a heap the optimizer step has just fragmented) was a tenth of a
  // capture's stall (issue 18: linear scaling).
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), snapshots_cf_, EncodeStepKey(step), &value);
  if (s.IsNotFound()) return false;
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "read snapshot record").WithContext(StepName(step)));
  return true;
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
  rocksdb::ManagedSnapshot at(db_);
  rocksdb::ReadOptions ro;
  ro.snapshot = at.snapshot();
  auto data = ReadSnapshotRecord(step, ro);
  if (!data.ok()) return data.status().WithContext(StepName(step));
  if (!data->has_value()) return Status::NotFound("no snapshot at " + StepName(step));
  return SnapshotTensors(**data, ro);
}

Result<std::string> RocksStore::SharedManifest(int64_t step) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  rocksdb::ManagedSnapshot at(db_);
  rocksdb::ReadOptions ro;
  ro.snapshot = at.snapshot();
  auto data = ReadSnapshotRecord(step, ro);
  if (!data.ok()) return data.status().WithContext(StepName(step));
  if (!data->has_value()) return Status::NotFound("no snapshot at " + StepName(step));
  auto shared = ReadSharedManifest(**data, ro);
  if (!shared.ok()) return shared.status().WithContext(StepName(step));
  return shared;
}

Result<std::string> RocksStore::ReadSharedManifest(const SnapshotRecordData& data, const rocksdb::ReadOptions& ro) {
  if (!data.shared.chunk) return data.shared.inline_bytes;
  return ReadMetadataChunk(*data.shared.chunk, "shared manifest " + data.shared.chunk->hash.Hex(), ro);
}

Result<std::string> RocksStore::ReadMetadataChunk(const ChunkRef& chunk, const std::string& where,
                                                  const rocksdb::ReadOptions& ro) {
  std::string value;
  TRAINSNAP_RETURN_IF_ERROR(ReadChunkValue(chunk.hash, ro, &value).WithContext(where));
  std::string raw(chunk.raw_bytes, '\0');
  TRAINSNAP_RETURN_IF_ERROR(ReadChunkInto(chunk, value, reinterpret_cast<uint8_t*>(raw.data())).WithContext(where));
  return raw;
}

Result<std::vector<TensorRecord>> RocksStore::ReadRecordGroup(const RecordGroupRef& group,
                                                              const rocksdb::ReadOptions& ro) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::string raw,
                             ReadMetadataChunk(group.chunk, "record group " + group.chunk.hash.Hex(), ro));
  return ParseRecordGroup(raw, group);
}

Result<std::vector<TensorRecord>> RocksStore::SnapshotTensors(const SnapshotRecordData& data,
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
      return record.status().WithContext(StepName(step) + ": tensor param_id " + ParamIdHex(key->param_id) +
                                         " role " + key->role);
    }
    out.push_back(std::move(*record));
    return Status::OK();
  });
  TRAINSNAP_RETURN_IF_ERROR(scanned.WithContext(StepName(step) + ": read tensor records"));
  return out;
}

Status RocksStore::ScanTensorRecords(int64_t step, const rocksdb::ReadOptions& base_ro, const RecordVisitor& visit) {
  rocksdb::ReadOptions ro = base_ro;
  const std::string prefix = TensorKeyPrefix(step);
  const std::string upper = PrefixUpperBound(prefix);
  rocksdb::Slice upper_slice(upper);
  if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, tensors_cf_));
  for (it->Seek(prefix); it->Valid(); it->Next()) {
    TRAINSNAP_RETURN_IF_ERROR(visit(std::string_view(it->key().data(), it->key().size()),
                                    std::string_view(it->value().data(), it->value().size())));
  }
  return FromRocks(it->status(), "scan tensor records");
}

Result<TensorRecord> RocksStore::Tensor(int64_t step, uint64_t param_id, std::string_view role) {
  TRAINSNAP_ASSIGN_OR_RETURN(TensorRecord record, CatalogTensor(step, param_id, role));
  if (registry_.unusable() == 0) return record;
  // A capture that reused this record would reference bytes that are not
  // there: it must write the tensor again.
  for (size_t i = 0; i < record.chunks.size(); ++i) {
    if (!registry_.Unusable(record.chunks[i].hash)) continue;
    return Status::Corruption(StepName(step) + ": tensor param_id " + ParamIdHex(param_id) + " role " +
                              std::string(role) + ": chunk " + std::to_string(i) + " " + record.chunks[i].hash.Hex() +
                              " is damaged (its pack file is missing or cut, or it fails its hash)");
  }
  return record;
}

Result<TensorRecord> RocksStore::CatalogTensor(int64_t step, uint64_t param_id, std::string_view role) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  const std::string name = StepName(step) + ": tensor param_id " + ParamIdHex(param_id) + " role " +
                           std::string(role);
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
  rocksdb::ManagedSnapshot at(db_);
  rocksdb::ReadOptions ro;
  ro.snapshot = at.snapshot();
  std::string value;
  rocksdb::Status s = db_->Get(ro, snapshots_cf_, EncodeStepKey(step), &value);
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
  s = db_->Get(ro, tensors_cf_, EncodeTensorKey(step, param_id, role), &value);
  if (s.IsNotFound()) return Status::NotFound(name + ": not in the store");
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, name));
  auto record = ParseTensorRecord(value, param_id, std::string(role));
  if (!record.ok()) return record.status().WithContext(name);
  return record;
}

}  // namespace trainsnap::internal
