// Deleting snapshots: Delete, Rollback and the batch both use.
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"

#include <set>

#include "store/keys.h"
#include "store/rocksdb_status.h"

namespace trainsnap::internal {

// --- deleting and garbage collection ------------------------------------------

Status RocksStore::DeleteSteps(const std::vector<int64_t>& steps, std::vector<ChunkRef>* released) {
  rocksdb::WriteBatch batch;
  TRAINSNAP_ASSIGN_OR_RETURN(std::optional<StoreCountsData> stored_counts, ReadCounts(nullptr));
  StoreCountsData counts = stored_counts.value_or(StoreCountsData());
  std::set<int64_t> gone;  // the steps of `steps` that are stored (each once)
  for (int64_t step : steps) {
    if (gone.count(step)) continue;
    std::string value;
    rocksdb::Status found = db_->Get(rocksdb::ReadOptions(), snapshots_cf_, EncodeStepKey(step), &value);
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
  if (gone.size() > counts.snapshots) {
    return Status::Corruption("the store records " + std::to_string(counts.snapshots) + " snapshots, fewer than the " +
                              std::to_string(gone.size()) + " to delete (run `trainsnap verify`)");
  }
  counts.snapshots -= gone.size();
  if (counts.newest_step && gone.count(*counts.newest_step)) {
    // The newest remaining step: the first stored key below, skipping the deleted.
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), snapshots_cf_));
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
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Delete(snapshots_cf_, EncodeStepKey(step)), "delete"));
    Status scanned = ScanTensorRecords(step, rocksdb::ReadOptions(), [&](std::string_view key, std::string_view value) {
      if (released) {
        // Only a hint for the incremental GC after retention: a record that
        // does not parse just releases nothing (a full GC still finds them).
        auto record = ParseTensorRecord(value, 0, "");
        if (record.ok()) released->insert(released->end(), record->chunks.begin(), record->chunks.end());
      }
      return FromRocks(batch.Delete(tensors_cf_, rocksdb::Slice(key.data(), key.size())), "delete");
    });
    TRAINSNAP_RETURN_IF_ERROR(scanned.WithContext(StepName(step)));
  }
  rocksdb::WriteOptions wo;
  wo.sync = sync_;
  TRAINSNAP_RETURN_IF_ERROR(CheckWrite(db_->Write(wo, &batch), "delete snapshots"));
  ResetTensorCache();
  return NoteTransaction(counts);
}

Status RocksStore::CheckStored(int64_t step) {
  auto data = ReadSnapshotRecord(step);
  if (!data.ok()) return data.status();
  if (!data->has_value()) return Status::NotFound("no such snapshot");
  return Status::OK();
}

Status RocksStore::Delete(int64_t step) {
  const std::string context = "delete " + StepName(step);
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable(context));
  MutexLock lock(&commit_mu_);
  UseReserveIfFull();
  auto attempt = [&]() -> Status {
    TRAINSNAP_RETURN_IF_ERROR(PrepareWrite().WithContext(context));
    std::shared_lock<std::shared_mutex> view_lock;
    TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
    TRAINSNAP_RETURN_IF_ERROR(CheckStored(step).WithContext(context));
    return DeleteSteps({step}, nullptr).WithContext(context);
  };
  // A failed delete changed nothing: with the reserve's space, try again.
  Status s = attempt();
  if (s.code() == StatusCode::kNoSpace && ReleaseReserve()) s = attempt();
  return s;
}

Status RocksStore::Rollback(int64_t step) {
  const std::string context = "rollback to " + StepName(step);
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable(context));
  MutexLock lock(&commit_mu_);
  UseReserveIfFull();
  auto attempt = [&]() -> Status {
    TRAINSNAP_RETURN_IF_ERROR(PrepareWrite().WithContext(context));
    std::shared_lock<std::shared_mutex> view_lock;
    TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
    TRAINSNAP_RETURN_IF_ERROR(CheckStored(step).WithContext(context));
    auto steps = ListSteps();
    if (!steps.ok()) return steps.status().WithContext(context);
    std::vector<int64_t> later;
    for (int64_t s : *steps) {
      if (s > step) later.push_back(s);
    }
    if (later.empty()) return Status::OK();
    return DeleteSteps(later, nullptr).WithContext(context);
  };
  // A failed rollback changed nothing: with the reserve's space, try again.
  Status s = attempt();
  if (s.code() == StatusCode::kNoSpace && ReleaseReserve()) s = attempt();
  return s;
}

}  // namespace trainsnap::internal
