#include "store/garbage_collector.h"

#include <map>
#include <set>

#include <rocksdb/snapshot.h>

#include "store/keys.h"
#include "store/kill_point.h"
#include "store/messages.h"
#include "store/pack_entry.h"
#include "store/retention.h"
#include "store/rocksdb_status.h"

namespace trainsnap::internal {

Status GarbageCollector::CollectLiveChunks(std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher>* live,
                                           const std::set<int64_t>& excluded) {
  // The tensor records and the snapshot records are read at one RocksDB
  // snapshot, and the records found per step must match each snapshot's
  // tensor count. RocksDB 7.8 was seen to end a scan early without an error
  // when a table-file read returns flipped bits
  // (CorruptionTest.GcUnderReadFlipsNeverDeletesALiveChunk,
  // docs/reliability.md): every chunk of a skipped record would look like
  // garbage. A mismatch refuses the collection.
  rocksdb::ManagedSnapshot at(db());  // released at scope exit
  rocksdb::ReadOptions options;
  options.snapshot = at.snapshot();
  std::map<int64_t, uint64_t> records_per_step;
  std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(options, session_.cf(ColumnFamily::kTensors)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto key = DecodeTensorKey(std::string_view(it->key().data(), it->key().size()));
    if (!key.ok()) return key.status();
    // A record that does not parse might reference any chunk: refuse to guess.
    auto record = ParseTensorRecord(std::string_view(it->value().data(), it->value().size()), key->param_id, key->role);
    if (!record.ok()) {
      return record.status().WithContext(StepName(key->step) + ": tensor param_id " + ParamIdHex(key->param_id) +
                                         " role " + key->role);
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
  std::unique_ptr<rocksdb::Iterator> sit(db()->NewIterator(options, session_.cf(ColumnFamily::kSnapshots)));
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
        auto records = catalog_.ReadRecordGroup(group, options);
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
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<SnapshotInfo> snapshots, catalog_.ListInView(at.snapshot()));
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
  return chunks_.AddDeltaBases(live);
}

Result<GcReport> GarbageCollector::Collect(const ProgressFn& progress) {
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> live;
  TRAINSNAP_RETURN_IF_ERROR(CollectLiveChunks(&live));
  uint64_t estimate = 0;
  db()->GetIntProperty(session_.cf(ColumnFamily::kChunks), "rocksdb.estimate-num-keys", &estimate);
  GcReport report;
  std::vector<ChunkHash> candidates;
  std::vector<uint64_t> sizes;
  std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(rocksdb::ReadOptions(), session_.cf(ColumnFamily::kChunks)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    TRAINSNAP_ASSIGN_OR_RETURN(ChunkHash hash, DecodeChunkKey(std::string_view(it->key().data(), it->key().size())));
    ++report.chunks_scanned;
    if (progress) progress(report.chunks_scanned, std::max(estimate, report.chunks_scanned));
    if (live.count(hash)) continue;
    candidates.push_back(hash);
    sizes.push_back(StoredBytes(std::string_view(it->value().data(), it->value().size())));
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan chunks"));
  return chunks_.EraseChunks(std::move(candidates), sizes, report);
}

Result<GcPlan> GarbageCollector::Plan(const std::vector<int64_t>& steps, const ProgressFn& progress) {
  const std::string context = "plan collection in " + session_.path();
  const std::set<int64_t> excluded(steps.begin(), steps.end());
  for (int64_t step : excluded)
    TRAINSNAP_RETURN_IF_ERROR(catalog_.CheckStored(step).WithContext(context + ": " + StepName(step)));
  // Two scans with CollectGarbageLocked's rule: what every snapshot needs
  // now, and what the snapshots left after the deletion need.
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> needed_now;
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> needed_after;
  TRAINSNAP_RETURN_IF_ERROR(CollectLiveChunks(&needed_now).WithContext(context));
  TRAINSNAP_RETURN_IF_ERROR(CollectLiveChunks(&needed_after, excluded).WithContext(context));
  uint64_t estimate = 0;
  db()->GetIntProperty(session_.cf(ColumnFamily::kChunks), "rocksdb.estimate-num-keys", &estimate);
  GcPlan plan;
  uint64_t scanned = 0;
  std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(rocksdb::ReadOptions(), session_.cf(ColumnFamily::kChunks)));
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

Result<PruneReport> GarbageCollector::Prune(const RetentionPolicy& policy, bool full_gc, bool sync,
                                            std::optional<int64_t> committed) {
  PruneReport report;
  if (policy.keep_last <= 0) return report;  // keep_last = 0 keeps everything
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<int64_t> steps, catalog_.ListSteps());
  std::vector<int64_t> outside;
  for (int64_t step : StepsOutsidePolicy(steps, policy)) {
    // A commit never deletes the snapshot it has just acknowledged.
    if (committed.has_value() && step == *committed) continue;
    outside.push_back(step);
  }
  if (!full_gc) return DeleteAndCollect(outside, sync);
  report.deleted_steps = std::move(outside);
  if (!report.deleted_steps.empty()) {
    TRAINSNAP_RETURN_IF_ERROR(catalog_.DeleteSteps(report.deleted_steps, sync, nullptr));
  }
  TRAINSNAP_ASSIGN_OR_RETURN(report.gc, Collect({}));
  return report;
}

Result<PruneReport> GarbageCollector::DeleteAndCollect(const std::vector<int64_t>& steps, bool sync) {
  PruneReport report;
  if (steps.empty()) return report;
  std::vector<ChunkRef> released;
  TRAINSNAP_RETURN_IF_ERROR(catalog_.DeleteSteps(steps, sync, &released, &report.deleted_steps));
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
  TRAINSNAP_RETURN_IF_ERROR(chunks_.ReadChunkDeps(&deps));
  std::vector<ChunkHash> todo;
  for (const auto& [hash, size] : dead) todo.push_back(hash);
  while (!todo.empty()) {
    auto d = deps.find(todo.back());
    todo.pop_back();
    if (d == deps.end() || live.count(d->second) || dead.count(d->second)) continue;
    rocksdb::PinnableSlice value;  // for its size; the caller holds the view
    rocksdb::Status gs =
        db()->Get(rocksdb::ReadOptions(), session_.cf(ColumnFamily::kChunks), EncodeChunkKey(d->second), &value);
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
  TRAINSNAP_ASSIGN_OR_RETURN(report.gc, chunks_.EraseChunks(std::move(candidates), sizes, gc));
  return report;
}

Result<std::vector<int64_t>> GarbageCollector::StepsWithUnusableChunks() {
  std::vector<int64_t> damaged;
  if (chunks_.registry().unusable() == 0) return damaged;
  rocksdb::ManagedSnapshot at(db());
  rocksdb::ReadOptions ro;
  ro.snapshot = at.snapshot();
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<int64_t> steps, catalog_.ListSteps(at.snapshot(), /*check_counts=*/false));
  auto uses_unusable = [&](const std::vector<TensorRecord>& records) {
    for (const TensorRecord& r : records) {
      for (const ChunkRef& c : r.chunks) {
        if (chunks_.registry().Unusable(c.hash)) return true;
      }
    }
    return false;
  };
  for (int64_t step : steps) {
    auto data = catalog_.ReadSnapshotRecord(step, ro);
    if (!data.ok() || !data->has_value()) {
      damaged.push_back(step);
      continue;
    }
    bool bad = (*data)->shared.chunk && chunks_.registry().Unusable((*data)->shared.chunk->hash);
    for (const RecordGroupRef& group : (*data)->groups) bad = bad || chunks_.registry().Unusable(group.chunk.hash);
    if (!bad) {
      // Records that cannot be read (a record group in a lost pack) may
      // reference anything: the step is damaged.
      auto records = catalog_.SnapshotTensors(**data, ro);
      bad = !records.ok() || uses_unusable(*records);
    }
    if (bad) damaged.push_back(step);
  }
  return damaged;
}
Status GarbageCollector::NameDamagedSteps(GcReport* report) {
  auto steps = StepsWithUnusableChunks();
  if (!steps.ok()) return steps.status().WithContext("name the damaged snapshots");
  report->damaged_steps = std::move(*steps);
  return Status::OK();
}

}  // namespace trainsnap::internal
