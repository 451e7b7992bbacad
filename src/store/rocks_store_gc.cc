// Garbage collection (live-chunk scan, erasing unpinned chunks), its plan,
// and retention (Prune).
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"

#include <set>

#include <rocksdb/snapshot.h>

#include "store/keys.h"
#include "store/kill_point.h"
#include "store/rocksdb_status.h"

namespace trainsnap::internal {

Status RocksStore::CollectLiveChunks(std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher>* live,
                                     const std::set<int64_t>& excluded) {
  // The tensor records and the snapshot records are read at one RocksDB
  // snapshot, and the records found per step must match each snapshot's
  // tensor count. RocksDB 7.8 was seen to end a scan early without an error
  // when a table-file read returns flipped bits
  // (CorruptionTest.GcUnderReadFlipsNeverDeletesALiveChunk,
  // docs/reliability.md): every chunk of a skipped record would look like
  // garbage. A mismatch refuses the collection.
  rocksdb::ManagedSnapshot at(db_);  // released at scope exit
  rocksdb::ReadOptions options;
  options.snapshot = at.snapshot();
  std::map<int64_t, uint64_t> records_per_step;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options, tensors_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto key = DecodeTensorKey(std::string_view(it->key().data(), it->key().size()));
    if (!key.ok()) return key.status();
    // A record that does not parse might reference any chunk: refuse to guess.
    auto record = ParseTensorRecord(std::string_view(it->value().data(), it->value().size()), key->param_id,
                                    key->role);
    if (!record.ok()) {
      return record.status().WithContext(StepName(key->step) + ": tensor param_id " +
                                         ParamIdHex(key->param_id) + " role " + key->role);
    }
    ++records_per_step[key->step];
    if (excluded.count(key->step) > 0) continue;
    for (const ChunkRef& c : record->chunks) live->emplace(c.hash, c.stored_bytes);
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan tensor records"));
  const std::string refuse = "scan of live chunks: refusing to collect garbage (run `trainsnap verify`): ";
  // Snapshot records of format version 2: every record-group chunk they
  // list is live (and any record's shared-manifest chunk), and so is every chunk its records reference. A group
  // that does not read might reference anything: refuse. Groups shared by
  // several snapshots are read once.
  std::unordered_map<ChunkHash, std::vector<ChunkRef>, ChunkHashHasher> group_chunks;
  std::unique_ptr<rocksdb::Iterator> sit(db_->NewIterator(options, snapshots_cf_));
  for (sit->SeekToFirst(); sit->Valid(); sit->Next()) {
    TRAINSNAP_ASSIGN_OR_RETURN(int64_t step, DecodeStepKey(std::string_view(sit->key().data(), sit->key().size())));
    auto data = ParseSnapshotRecord(std::string_view(sit->value().data(), sit->value().size()), step);
    if (!data.ok()) return data.status().WithContext(refuse + StepName(step));
    // The shared manifest's chunk is live while one snapshot references it.
    if (data->shared.chunk && excluded.count(step) == 0) {
      live->emplace(data->shared.chunk->hash, data->shared.chunk->stored_bytes);
    }
    if (!data->grouped) continue;
    uint64_t& seen = records_per_step[step];
    for (const RecordGroupRef& group : data->groups) {
      auto known = group_chunks.find(group.chunk.hash);
      if (known == group_chunks.end()) {
        auto records = ReadRecordGroup(group, options);
        if (!records.ok()) return records.status().WithContext(refuse + StepName(step));
        std::vector<ChunkRef> refs;
        for (const TensorRecord& r : *records) refs.insert(refs.end(), r.chunks.begin(), r.chunks.end());
        known = group_chunks.emplace(group.chunk.hash, std::move(refs)).first;
      }
      seen += group.records;  // ParseRecordGroup checked the count
      if (excluded.count(step) > 0) continue;
      live->emplace(group.chunk.hash, group.chunk.stored_bytes);
      for (const ChunkRef& c : known->second) live->emplace(c.hash, c.stored_bytes);
    }
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(sit->status(), "scan snapshot records"));
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<SnapshotInfo> snapshots, ListInView(at.snapshot()));
  for (const SnapshotInfo& info : snapshots) {
    auto found = records_per_step.find(info.step);
    const uint64_t seen = found == records_per_step.end() ? 0 : found->second;
    if (seen != info.tensors) {
      return Status::Corruption(refuse + StepName(info.step) + " has " + std::to_string(info.tensors) +
                                " tensors but " + std::to_string(seen) + " tensor records were read");
    }
    if (found != records_per_step.end()) records_per_step.erase(found);
  }
  if (!records_per_step.empty()) {
    return Status::Corruption(refuse + "tensor records of " + StepName(records_per_step.begin()->first) +
                              ", which has no snapshot record (`trainsnap verify --repair` deletes them)");
  }
  return AddDeltaBases(live);
}

Status RocksStore::ReadChunkDeps(std::unordered_map<ChunkHash, ChunkHash, ChunkHashHasher>* deps) {
  if (chunk_deps_cf_ == nullptr) return Status::OK();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), chunk_deps_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto hash = DecodeChunkKey(std::string_view(it->key().data(), it->key().size()));
    auto base = DecodeChunkKey(std::string_view(it->value().data(), it->value().size()));
    // A damaged entry might hide a needed base: refuse to collect.
    if (!hash.ok()) return hash.status().WithContext("chunk_deps key");
    if (!base.ok()) return base.status().WithContext("chunk_deps of " + hash->Hex());
    deps->emplace(*hash, *base);
  }
  return FromRocks(it->status(), "scan chunk_deps");
}

Status RocksStore::AddDeltaBases(std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher>* live) {
  std::unordered_map<ChunkHash, ChunkHash, ChunkHashHasher> deps;
  TRAINSNAP_RETURN_IF_ERROR(ReadChunkDeps(&deps));
  if (deps.empty()) return Status::OK();
  std::vector<ChunkHash> todo;
  for (const auto& [hash, size] : *live) todo.push_back(hash);
  while (!todo.empty()) {
    const ChunkHash h = todo.back();
    todo.pop_back();
    auto d = deps.find(h);
    if (d == deps.end()) continue;
    if (live->emplace(d->second, 0).second) todo.push_back(d->second);
  }
  return Status::OK();
}

Result<GcReport> RocksStore::EraseChunks(std::vector<ChunkHash> candidates, const std::vector<uint64_t>& sizes,
                                         GcReport report) {
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> size_of;
  for (size_t i = 0; i < candidates.size(); ++i) size_of[candidates[i]] = sizes[i];
  for (size_t begin = 0; begin < candidates.size(); begin += kGcBatch) {
    std::vector<ChunkHash> batch_hashes(candidates.begin() + begin,
                                        candidates.begin() + std::min(candidates.size(), begin + kGcBatch));
    Status s = registry_.EraseUnpinned(&batch_hashes, [&](const std::vector<ChunkHash>& hashes) {
      rocksdb::WriteBatch batch;
      for (const ChunkHash& h : hashes) {
        TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Delete(chunks_cf_, EncodeChunkKey(h)), "delete chunk"));
        if (chunk_deps_cf_ != nullptr) {
          TRAINSNAP_RETURN_IF_ERROR(
              FromRocks(batch.Delete(chunk_deps_cf_, EncodeChunkKey(h)), "delete chunk dependency"));
        }
      }
      return CheckWrite(db_->Write(rocksdb::WriteOptions(), &batch), "delete chunks");
    });
    TRAINSNAP_RETURN_IF_ERROR(s);
    TRAINSNAP_KILL_POINT(kKillGcMidway);
    for (const ChunkHash& h : batch_hashes) {
      report.chunks_deleted += 1;
      report.bytes_deleted += size_of[h];
    }
  }
  report.chunks_live = report.chunks_scanned - report.chunks_deleted;
  return report;
}

Result<GcReport> RocksStore::CollectGarbageLocked(const ProgressFn& progress) {
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> live;
  TRAINSNAP_RETURN_IF_ERROR(CollectLiveChunks(&live));
  uint64_t estimate = 0;
  db_->GetIntProperty(chunks_cf_, "rocksdb.estimate-num-keys", &estimate);
  GcReport report;
  std::vector<ChunkHash> candidates;
  std::vector<uint64_t> sizes;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), chunks_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    TRAINSNAP_ASSIGN_OR_RETURN(ChunkHash hash, DecodeChunkKey(std::string_view(it->key().data(), it->key().size())));
    ++report.chunks_scanned;
    if (progress) progress(report.chunks_scanned, std::max(estimate, report.chunks_scanned));
    if (live.count(hash)) continue;
    candidates.push_back(hash);
    sizes.push_back(StoredBytes(std::string_view(it->value().data(), it->value().size())));
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan chunks"));
  return EraseChunks(std::move(candidates), sizes, report);
}

Result<GcReport> RocksStore::CollectGarbage(const ProgressFn& progress) {
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable("collect garbage"));
  TRAINSNAP_RETURN_IF_ERROR(CheckNoLostCommits("collect garbage in " + path_));
  MutexLock lock(&commit_mu_);
  UseReserveIfFull();
  std::shared_lock<std::shared_mutex> view_lock;
  // Runs under commit_mu_, held above (the analysis does not follow lambdas).
  auto attempt = [&]() NO_THREAD_SAFETY_ANALYSIS -> Result<GcReport> {
    TRAINSNAP_RETURN_IF_ERROR(PrepareWrite().WithContext("collect garbage"));
    TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
    return CollectGarbageLocked(progress);
  };
  // What a failed collection deleted was garbage: collecting again is safe.
  auto report = attempt();
  if (!report.ok() && report.status().code() == StatusCode::kNoSpace && ReleaseReserve()) {
    if (view_lock.owns_lock()) view_lock.unlock();
    report = attempt();
  }
  if (report.ok()) {
    Status s = GiveSpaceBack(&view_lock, &*report);
    if (s.ok()) s = NameDamagedSteps(&*report);
    if (!s.ok()) report = s;
  }
  if (!report.ok()) return report.status().WithContext("collect garbage in " + path_);
  return report;
}

Status RocksStore::NameDamagedSteps(GcReport* report) {
  auto steps = StepsWithUnusableChunks();
  if (!steps.ok()) return steps.status().WithContext("name the damaged snapshots");
  report->damaged_steps = std::move(*steps);
  return Status::OK();
}

Result<GcPlan> RocksStore::PlanCollection(const std::vector<int64_t>& steps, const ProgressFn& progress) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  const std::string context = "plan collection in " + path_;
  const std::set<int64_t> excluded(steps.begin(), steps.end());
  for (int64_t step : excluded) TRAINSNAP_RETURN_IF_ERROR(CheckStored(step).WithContext(context + ": " + StepName(step)));
  // Two scans with CollectGarbageLocked's rule: what every snapshot needs
  // now, and what the snapshots left after the deletion need.
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> needed_now;
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> needed_after;
  TRAINSNAP_RETURN_IF_ERROR(CollectLiveChunks(&needed_now).WithContext(context));
  TRAINSNAP_RETURN_IF_ERROR(CollectLiveChunks(&needed_after, excluded).WithContext(context));
  uint64_t estimate = 0;
  db_->GetIntProperty(chunks_cf_, "rocksdb.estimate-num-keys", &estimate);
  GcPlan plan;
  uint64_t scanned = 0;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), chunks_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto hash = DecodeChunkKey(std::string_view(it->key().data(), it->key().size()));
    if (!hash.ok()) return hash.status().WithContext(context);
    ++scanned;
    if (progress) progress(scanned, std::max(estimate, scanned));
    if (needed_after.count(*hash) > 0) continue;
    // The size as the collection counts it: the encoded chunk's length.
    const uint64_t size = StoredBytes(std::string_view(it->value().data(), it->value().size()));
    if (needed_now.count(*hash) > 0) {
      ++plan.chunks_freed;
      plan.bytes_freed += size;
    } else {
      ++plan.chunks_unreferenced;
      plan.bytes_unreferenced += size;
    }
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), context + ": scan chunks"));
  return plan;
}

Status RocksStore::CheckRetentionKeeps(int64_t step) {
  if (retention_.keep_last <= 0) return Status::OK();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), snapshots_cf_));
  it->SeekToLast();
  if (!it->Valid()) return FromRocks(it->status(), "latest snapshot");
  TRAINSNAP_ASSIGN_OR_RETURN(int64_t latest,
                             DecodeStepKey(std::string_view(it->key().data(), it->key().size())));
  if (step >= latest) return Status::OK();
  // Retention keeps the highest steps, and Latest() is the highest step: a
  // snapshot committed below it would be pruned as soon as keep_last higher
  // ones exist, and would never be the one RestoreLatest returns. A run that
  // resumed from an older step must drop the abandoned later snapshots first.
  return Status::InvalidArgument("below the latest stored " + StepName(latest) +
                                 ": retention (keep_last = " + std::to_string(retention_.keep_last) +
                                 ") keeps the highest steps and RestoreLatest returns the highest; "
                                 "Rollback to the step the run resumed from first, or keep steps increasing");
}

Result<PruneReport> RocksStore::PruneLocked(const RetentionPolicy& policy, bool full_gc,
                                            std::optional<int64_t> committed) {
  PruneReport report;
  if (policy.keep_last <= 0) return report;  // keep_last = 0 keeps everything
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListSteps());
  const size_t keep_from = steps.size() > static_cast<size_t>(policy.keep_last)
                               ? steps.size() - static_cast<size_t>(policy.keep_last)
                               : 0;
  for (size_t i = 0; i < keep_from; ++i) {
    if (policy.keep_every > 0 && steps[i] % policy.keep_every == 0) continue;
    // A commit never deletes the snapshot it has just acknowledged.
    if (committed.has_value() && steps[i] == *committed) continue;
    report.deleted_steps.push_back(steps[i]);
  }
  std::vector<ChunkRef> released;
  if (!report.deleted_steps.empty()) {
    TRAINSNAP_RETURN_IF_ERROR(DeleteSteps(report.deleted_steps, full_gc ? nullptr : &released));
  }
  if (full_gc) {
    TRAINSNAP_ASSIGN_OR_RETURN(report.gc, CollectGarbageLocked({}));
    return report;
  }
  if (released.empty()) return report;
  // Incremental: only the chunks the deleted snapshots referenced can have
  // become garbage; a full scan of the chunks would read every blob.
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> live;
  TRAINSNAP_RETURN_IF_ERROR(CollectLiveChunks(&live));
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> dead;
  for (const ChunkRef& c : released) {
    if (!live.count(c.hash)) dead.emplace(c.hash, c.stored_bytes);
  }
  // The bases of dead delta chunks that nothing live needs are dead too.
  std::unordered_map<ChunkHash, ChunkHash, ChunkHashHasher> deps;
  TRAINSNAP_RETURN_IF_ERROR(ReadChunkDeps(&deps));
  std::vector<ChunkHash> todo;
  for (const auto& [hash, size] : dead) todo.push_back(hash);
  while (!todo.empty()) {
    auto d = deps.find(todo.back());
    todo.pop_back();
    if (d == deps.end() || live.count(d->second) || dead.count(d->second)) continue;
    rocksdb::PinnableSlice value;  // for its size; the caller holds the view
    rocksdb::Status gs = db_->Get(rocksdb::ReadOptions(), chunks_cf_, EncodeChunkKey(d->second), &value);
    if (gs.IsNotFound()) continue;
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(gs, "read delta base " + d->second.Hex()));
    dead.emplace(d->second, StoredBytes(std::string_view(value.data(), value.size())));
    todo.push_back(d->second);
  }
  std::vector<ChunkHash> candidates;
  std::vector<uint64_t> sizes;
  for (const auto& [hash, size] : dead) {
    candidates.push_back(hash);
    sizes.push_back(size);
  }
  GcReport gc;
  gc.chunks_scanned = candidates.size();
  TRAINSNAP_ASSIGN_OR_RETURN(report.gc, EraseChunks(std::move(candidates), sizes, gc));
  return report;
}

Result<PruneReport> RocksStore::Prune(const RetentionPolicy& policy) {
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable("prune"));
  if (policy.keep_last < 0 || policy.keep_every < 0) {
    return Status::InvalidArgument("prune: retention counts must be >= 0");
  }
  TRAINSNAP_RETURN_IF_ERROR(CheckNoLostCommits("prune " + path_));
  MutexLock lock(&commit_mu_);
  UseReserveIfFull();
  TRAINSNAP_RETURN_IF_ERROR(PrepareWrite().WithContext("prune"));
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  auto report = PruneLocked(policy, /*full_gc=*/true);
  if (report.ok()) {
    Status s = GiveSpaceBack(&view_lock, &report->gc);
    if (s.ok()) s = NameDamagedSteps(&report->gc);
    if (!s.ok()) report = s;
  }
  if (!report.ok()) return report.status().WithContext("prune " + path_);
  return report;
}

}  // namespace trainsnap::internal
