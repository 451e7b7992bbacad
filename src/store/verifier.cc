#include "store/verifier.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include <rocksdb/metadata.h>
#include <rocksdb/snapshot.h>
#include <rocksdb/sst_file_reader.h>

#include "store/keys.h"
#include "store/messages.h"
#include "store/pack_damage.h"
#include "store/pack_entry.h"
#include "store/pack_set.h"
#include "store/parallel_for.h"
#include "store/rocksdb_status.h"
#include "store/thread_scratch.h"

namespace trainsnap::internal {

namespace fs = std::filesystem;

namespace {

// Tries of Verify's recheck of damaged packs against a newer instance
// (read-only stores).
constexpr int kPackRechecks = 3;

// The end of the last chunk the index `cf` of `db` places in each pack; an
// entry that does not parse is reported through `problem`.
Status PackEnds(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf, std::map<uint32_t, uint64_t>* ends,
                const std::function<void(std::string, Status)>& problem) {
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), cf));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto entry = ParsePackEntry(std::string_view(it->value().data(), it->value().size()));
    if (!entry.ok()) {
      auto hash = DecodeChunkKey(std::string_view(it->key().data(), it->key().size()));
      problem("", entry.status().WithContext("chunk index entry of " + (hash.ok() ? hash->Hex() : "a bad key")));
      continue;
    }
    uint64_t& end = (*ends)[entry->pack];
    end = std::max(end, entry->end());
  }
  return FromRocks(it->status(), "scan the chunk index");
}

}  // namespace

Result<VerifyReport> Verifier::Verify(std::optional<int64_t> step, const ProgressFn& progress) {
  const std::string context = "verify " + session_.path();
  std::vector<int64_t> steps;
  if (step) {
    auto data = catalog_.ReadSnapshotRecord(*step);
    if (!data.ok() && data.status().code() != StatusCode::kCorruption &&
        data.status().code() != StatusCode::kNotSupported) {
      return data.status().WithContext(context);
    }
    if (data.ok() && !data->has_value()) return Status::NotFound(context + ": no snapshot at " + StepName(*step));
    steps.push_back(*step);
  }
  VerifyReport report;
  if (!step) {
    VerifyStore(&report);
    // Every snapshot record the scan finds is verified; a count that
    // disagrees with the scan is one of VerifyStore's problems.
    // A scan that fails is one more problem; the file checks above say where.
    auto all = catalog_.ListSteps(nullptr, /*check_counts=*/false);
    if (all.ok()) {
      steps = std::move(*all);
    } else {
      VerifyProblem p;
      p.store = true;
      p.status = all.status();
      report.problems.push_back(std::move(p));
    }
  }
  // Shared manifests are read and re-hashed once per chunk; a damaged one
  // is a problem of every snapshot that references it.
  std::unordered_map<ChunkHash, Status, ChunkHashHasher> shared_checked;
  for (size_t si = 0; si < steps.size(); ++si) {
    const int64_t s = steps[si];
    ++report.snapshots;
    if (progress) progress(si, steps.size());
    auto record = catalog_.ReadSnapshotRecord(s);
    if (!record.ok()) {
      report.problems.push_back(
          {s, 0, "", -1, {}, record.status().WithContext(StepName(s) + ": snapshot record"), false, {}});
      continue;
    }
    if (record->has_value() && (*record)->shared.chunk) {
      const ChunkRef& shared = *(*record)->shared.chunk;
      auto checked = shared_checked.find(shared.hash);
      if (checked == shared_checked.end()) {
        checked =
            shared_checked.emplace(shared.hash, catalog_.ReadSharedManifest(**record, rocksdb::ReadOptions()).status())
                .first;
      }
      if (!checked->second.ok()) {
        report.problems.push_back({s, 0, "", -1, shared.hash, checked->second.WithContext(StepName(s)), false, {}});
      }
    }
    uint64_t tensors_seen = 0;
    // Reads, decodes and re-hashes every chunk of one tensor record.
    auto verify_tensor = [&](uint64_t param_id, const std::string& role, const TensorRecord& tensor) {
      const std::string where = StepName(s) + ": tensor param_id " + ParamIdHex(param_id) + " role " + role;
      // Chunks are read, decoded and re-hashed in parallel; problems are
      // reported in chunk order.
      const size_t n = tensor.chunks.size();
      std::vector<Status> chunk_status(n);
      std::atomic<uint64_t> good_bytes{0};
      static_cast<void>(ParallelFor(pool_, n, [&](size_t ci) -> Status {
        const ChunkRef& ref = tensor.chunks[ci];
        const std::string chunk_where = where + ": chunk " + std::to_string(ci);
        // The whole encoded chunk (header included, also for raw chunks),
        // with RocksDB's checksums on for its index entry.
        auto entry = chunks_.LookupEntry(ref.hash, rocksdb::ReadOptions());
        thread_local std::string value;
        ScratchTrim value_trim(value);
        if (!entry.ok()) {
          chunk_status[ci] = entry.status().WithContext(chunk_where);
        } else if (!entry->has_value()) {
          chunk_status[ci] =
              Status::NotFound(chunk_where + " " + ref.hash.Hex() + ": referenced but missing from the store");
        } else if (Status read = chunks_.ReadChunkValueAt(ref.hash, **entry, &value); !read.ok()) {
          chunk_status[ci] = read.WithContext(chunk_where);
        } else {
          thread_local std::vector<uint8_t> buffer;
          ScratchTrim buffer_trim(buffer);
          buffer.resize(ref.raw_bytes);
          chunk_status[ci] = chunks_.ReadChunkInto(ref, value, buffer.data()).WithContext(chunk_where);
          if (chunk_status[ci].ok()) good_bytes += ref.raw_bytes;
        }
        return Status::OK();
      }));
      report.chunks += n;
      report.bytes += good_bytes.load();
      for (size_t ci = 0; ci < n; ++ci) {
        if (!chunk_status[ci].ok()) {
          report.problems.push_back({s,
                                     param_id,
                                     role,
                                     static_cast<int64_t>(ci),
                                     tensor.chunks[ci].hash,
                                     std::move(chunk_status[ci]),
                                     false,
                                     {}});
        }
      }
    };
    if (record->has_value() && (*record)->grouped) {
      // Format version 2: the records come from record groups; a group that
      // does not read (missing, damaged, hash mismatch, malformed) is one
      // problem naming the group's chunk, and its records count as seen.
      const SnapshotRecordData& data = **record;
      for (const RecordGroupRef& group : data.groups) {
        tensors_seen += group.records;
        report.tensors += group.records;
        auto records = catalog_.ReadRecordGroup(group, rocksdb::ReadOptions());
        if (!records.ok()) {
          report.problems.push_back(
              {s, 0, "", -1, group.chunk.hash, records.status().WithContext(StepName(s)), false, {}});
          continue;
        }
        for (const TensorRecord& tensor : *records) verify_tensor(tensor.param_id, tensor.role, tensor);
      }
      continue;
    }
    // A record that does not decode is a problem; the scan goes on.
    Status scanned =
        catalog_.ScanTensorRecords(s, rocksdb::ReadOptions(), [&](std::string_view key_bytes, std::string_view value) {
          ++tensors_seen;
          ++report.tensors;
          auto key = DecodeTensorKey(key_bytes);
          if (!key.ok()) {
            report.problems.push_back({s, 0, "", -1, {}, key.status().WithContext(StepName(s)), false, {}});
            return Status::OK();
          }
          const std::string where =
              StepName(s) + ": tensor param_id " + ParamIdHex(key->param_id) + " role " + key->role;
          auto tensor = ParseTensorRecord(value, key->param_id, key->role);
          if (!tensor.ok()) {
            report.problems.push_back(
                {s, key->param_id, key->role, -1, {}, tensor.status().WithContext(where), false, {}});
            return Status::OK();
          }
          verify_tensor(key->param_id, key->role, *tensor);
          return Status::OK();
        });
    if (!scanned.ok()) {
      report.problems.push_back({s, 0, "", -1, {}, scanned.WithContext(StepName(s)), false, {}});
    } else if (record->has_value() && (*record)->info.tensors != tensors_seen) {
      report.problems.push_back(
          {s,
           0,
           "",
           -1,
           {},
           Status::Corruption(StepName(s) + ": snapshot record lists " + std::to_string((*record)->info.tensors) +
                              " tensors, the store holds " + std::to_string(tensors_seen)),
           false,
           {}});
    }
  }
  if (progress) progress(steps.size(), steps.size());
  // A read-only store verifies the snapshots of its view while the writer
  // goes on: a snapshot it deleted meanwhile (its chunks collected) is no
  // problem of the store, and a snapshot it still holds is checked by the
  // reads above, which look a moved chunk up again (CurrentEntry).
  std::set<int64_t> failed_steps;
  for (const VerifyProblem& p : report.problems) {
    if (!p.store) failed_steps.insert(p.step);
  }
  std::set<int64_t> deleted;
  for (int64_t s : failed_steps) {
    if (!session_.read_only()) break;
    auto stored = StoredNow(s);
    if (stored.ok() && !*stored) deleted.insert(s);
  }
  if (!deleted.empty()) {
    std::vector<VerifyProblem> kept;
    for (VerifyProblem& p : report.problems) {
      if (p.store || deleted.count(p.step) == 0) kept.push_back(std::move(p));
    }
    report.problems = std::move(kept);
    report.deleted_meanwhile.assign(deleted.begin(), deleted.end());
  }
  // A writer stops deduplicating onto chunks that fail their hash.
  if (!session_.read_only()) {
    std::vector<ChunkHash> bad;
    for (const VerifyProblem& p : report.problems) {
      if (!p.store && p.chunk_index >= 0 && p.status.code() == StatusCode::kCorruption) bad.push_back(p.hash);
    }
    static_cast<void>(chunks_.MarkUnusableWithDeltas(std::move(bad)));
  }
  return report;
}

void Verifier::VerifyStore(VerifyReport* report) {
  auto problem = [&](std::string file, Status status) {
    VerifyProblem p;
    p.store = true;
    p.file = std::move(file);
    p.status = std::move(status);
    report->problems.push_back(std::move(p));
  };
  // RocksDB's block checksums of every table file, one file at a time, so
  // that each damaged file is named (DB::VerifyChecksum stops at the first).
  // No table file is deleted until the last one is read: a background
  // compaction that replaced a listed file would otherwise delete it under
  // the reader, and its absence would read as damage (seen under ASan: a
  // false "table file ... is missing"). Deletions are counted, so this
  // nests with any other holder; a read-only open deletes nothing.
  const bool hold_deletions = session_.txn_db() != nullptr && db()->DisableFileDeletions().ok();
  struct ResumeDeletions {
    rocksdb::DB* db;
    ~ResumeDeletions() {
      if (db != nullptr) db->EnableFileDeletions(/*force=*/false).PermitUncheckedError();
    }
  } resume{hold_deletions ? db() : nullptr};
  std::vector<rocksdb::LiveFileMetaData> tables;
  db()->GetLiveFilesMetaData(&tables);
  std::sort(tables.begin(), tables.end(), [](const rocksdb::LiveFileMetaData& a, const rocksdb::LiveFileMetaData& b) {
    return a.relative_filename < b.relative_filename;
  });
  rocksdb::Options table_options;
  if (session_.env() != nullptr) table_options.env = session_.env();
  for (const rocksdb::LiveFileMetaData& table : tables) {
    const std::string where =
        "table file " + table.relative_filename + " (column family " + table.column_family_name + ")";
    rocksdb::SstFileReader reader(table_options);
    rocksdb::Status s = reader.Open(table.directory + "/" + table.relative_filename);
    if (s.ok()) s = reader.VerifyChecksum();
    if (!s.ok() && session_.read_only() && !TableLiveNow(table.relative_filename)) continue;  // compacted away since
    if (!s.ok()) {
      Status mapped = FromRocks(s, where);
      // Any failure to read back a file the MANIFEST lists is damage.
      if (mapped.code() == StatusCode::kIOError) mapped = Status::Corruption(mapped.message());
      problem(table.relative_filename, std::move(mapped));
    }
  }
  // Pack files (chunk bytes): each one the chunk index names must be there,
  // start with the pack magic and hold the last chunk the index places in
  // it. The chunks themselves are checked by the reads below.
  std::map<uint32_t, uint64_t> pack_ends;
  Status scanned = PackEnds(db(), session_.cf(ColumnFamily::kChunks), &pack_ends, problem);
  if (!scanned.ok()) problem("", scanned);
  auto files = chunks_.packs().List();
  std::vector<PackDamage> damage;
  if (files.ok()) damage = FindPackDamage(pack_ends, *files);
  // This store's view may be older than a compaction that removed or cut a
  // pack since: what the writer's index names now decides. Each try takes an
  // instance opened after the last listing, then lists again: a pack missing
  // from a listing and still named by an instance opened after it is damage
  // (the writer removes a pack only after its index entries), and a pack
  // created after the instance is not named by it. Another compaction may
  // remove a pack between an instance's open and the next listing: hence
  // more than one try.
  for (int tries = 0; !damage.empty() && session_.read_only() && tries < kPackRechecks; ++tries) {
    auto newer = session_.NewerThan(session_.newer_opened());
    std::map<uint32_t, uint64_t> ends_now;
    if (newer.ok() &&
        PackEnds((*newer)->handles.db, (*newer)->handles.cf(ColumnFamily::kChunks), &ends_now, [](std::string, Status) {
        }).ok()) {
      pack_ends = std::move(ends_now);
      files = chunks_.packs().List();
      damage = files.ok() ? FindPackDamage(pack_ends, *files) : std::vector<PackDamage>();
    }
  }
  if (!files.ok()) problem(kPackDir, files.status());
  std::set<uint32_t> damaged;
  for (const PackDamage& d : damage) {
    damaged.insert(d.pack);
    problem(std::string(kPackDir) + "/" + PackFileName(d.pack),
            Status::Corruption("pack file " + d.Describe() + (d.size ? "" : " (a file of the store)")));
  }
  if (!session_.read_only()) static_cast<void>(chunks_.NoteDamage(damage));
  for (const auto& [pack, end] : pack_ends) {
    if (damaged.count(pack) > 0) continue;
    const std::string file = std::string(kPackDir) + "/" + PackFileName(pack);
    char magic[kPackHeaderBytes] = {};
    Status read = chunks_.packs().ReadAt(pack, 0, kPackHeaderBytes, reinterpret_cast<uint8_t*>(magic));
    if (read.ok() && std::string_view(magic, kPackHeaderBytes) != std::string_view(kPackMagic, kPackHeaderBytes)) {
      read = Status::Corruption("bad magic");
    }
    if (!read.ok()) problem(file, read.WithContext("pack file " + file));
  }
  // Every column family the store relies on, read at one snapshot.
  rocksdb::ManagedSnapshot at(db());
  rocksdb::ReadOptions ro;
  ro.snapshot = at.snapshot();
  {
    std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(ro, session_.cf(ColumnFamily::kMeta)));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
    }
    if (!it->status().ok()) problem("", FromRocks(it->status(), "scan the meta column family"));
  }
  auto counts = catalog_.ReadCounts(at.snapshot());
  if (!counts.ok()) problem("", counts.status());
  auto steps = catalog_.ListSteps(at.snapshot(), /*check_counts=*/counts.ok());
  if (!steps.ok()) problem("", steps.status());
  std::map<int64_t, uint64_t> leftovers;
  Status s = catalog_.FindLeftovers(at.snapshot(), &leftovers);
  if (!s.ok()) problem("", s.WithContext("scan the tensor records"));
  for (const auto& [leftover, records] : leftovers) {
    problem("", Status::Corruption(std::to_string(records) + " tensor records of " + StepName(leftover) +
                                   ", which has no snapshot record (leftovers of a deleted step; "
                                   "`trainsnap verify --repair` deletes them)"));
  }
  if (session_.cf(ColumnFamily::kChunkDeps) != nullptr) {
    std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(ro, session_.cf(ColumnFamily::kChunkDeps)));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto hash = DecodeChunkKey(std::string_view(it->key().data(), it->key().size()));
      auto base = DecodeChunkKey(std::string_view(it->value().data(), it->value().size()));
      if (!hash.ok()) {
        problem("", hash.status().WithContext("chunk_deps key"));
      } else if (!base.ok()) {
        problem("", base.status().WithContext("chunk_deps of " + hash->Hex()));
      }
    }
    if (!it->status().ok()) problem("", FromRocks(it->status(), "scan the chunk_deps column family"));
  }
  if (std::optional<LostCommits> loss = catalog_.lost_commits()) {
    problem(CommitLog::kFileName,
            Status::Corruption(DescribeLoss(*loss) + " (acknowledge with `trainsnap verify --acknowledge-loss`)"));
  }
  auto log = CommitLog::Read(session_.path());
  if (!log.ok()) problem(CommitLog::kFileName, log.status());
}

bool Verifier::TableLiveNow(const std::string& name) {
  auto newer = session_.NewerThan(session_.newer_opened());
  if (!newer.ok()) return true;  // cannot tell: the failure stands
  std::vector<rocksdb::LiveFileMetaData> tables;
  (*newer)->handles.db->GetLiveFilesMetaData(&tables);
  for (const rocksdb::LiveFileMetaData& t : tables) {
    if (t.relative_filename == name) return true;
  }
  return false;
}

Result<bool> Verifier::StoredNow(int64_t step) {
  rocksdb::DB* db = session_.db();
  rocksdb::ColumnFamilyHandle* snapshots = session_.cf(ColumnFamily::kSnapshots);
  std::shared_ptr<const DbSession::Newer> newer;
  if (session_.read_only()) {
    TRAINSNAP_ASSIGN_OR_RETURN(newer, session_.NewerThan(session_.newer_opened()));
    db = newer->handles.db;
    snapshots = newer->handles.cf(ColumnFamily::kSnapshots);
  }
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), snapshots, EncodeStepKey(step), &value);
  if (s.IsNotFound()) return false;
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "read snapshot record of " + StepName(step)));
  return true;
}

}  // namespace trainsnap::internal
