// Damaged chunks (docs/reliability.md, "Damaged packs"): finding the chunks a
// missing or short pack file lost, or whose bytes fail their hash, and
// keeping writers from deduplicating onto them, so that no commit
// references bytes that are not there.
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"

#include <sys/stat.h>

#include <algorithm>
#include <set>
#include <unordered_set>

#include <rocksdb/snapshot.h>

#include "store/keys.h"
#include "store/rocksdb_status.h"

namespace trainsnap::internal {

Status RocksStore::NoteDamage(const std::vector<PackDamage>& damage) {
  if (read_only_ || damage.empty()) return Status::OK();
  std::vector<PackDamage> fresh;
  {
    MutexLock lock(&damage_mu_);
    for (const PackDamage& d : damage) {
      auto known = damaged_packs_.find(d.pack);
      if (known != damaged_packs_.end() && known->second.size == d.size) continue;
      damaged_packs_[d.pack] = d;
      fresh.push_back(d);
    }
  }
  if (fresh.empty()) return Status::OK();
  // Appends to a pack whose file is gone would never reach a file.
  const std::optional<uint32_t> active = packs_->active_pack();
  for (const PackDamage& d : fresh) {
    if (active == d.pack) packs_->Rotate();
  }
  std::vector<ChunkHash> lost;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), chunks_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto entry = ParsePackEntry(std::string_view(it->value().data(), it->value().size()));
    if (!entry.ok()) continue;  // Verify reports it; it names no pack to trust
    for (const PackDamage& d : fresh) {
      if (!d.Covers(*entry)) continue;
      auto hash = DecodeChunkKey(std::string_view(it->key().data(), it->key().size()));
      if (hash.ok()) lost.push_back(*hash);
      break;
    }
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan the chunk index for damaged packs"));
  return MarkUnusableWithDeltas(std::move(lost));
}

Status RocksStore::MarkUnusableWithDeltas(std::vector<ChunkHash> hashes) {
  if (read_only_ || hashes.empty()) return Status::OK();
  // A delta chunk decodes only with its base: deltas of a lost chunk are
  // lost too, however whole their own bytes are.
  std::unordered_map<ChunkHash, ChunkHash, ChunkHashHasher> deps;
  TRAINSNAP_RETURN_IF_ERROR(ReadChunkDeps(&deps));
  std::unordered_map<ChunkHash, std::vector<ChunkHash>, ChunkHashHasher> deltas_of;
  for (const auto& [delta, base] : deps) deltas_of[base].push_back(delta);
  std::unordered_set<ChunkHash, ChunkHashHasher> marked(hashes.begin(), hashes.end());
  std::vector<ChunkHash> todo = hashes;
  while (!todo.empty()) {
    const ChunkHash h = todo.back();
    todo.pop_back();
    auto found = deltas_of.find(h);
    if (found == deltas_of.end()) continue;
    for (const ChunkHash& delta : found->second) {
      if (marked.insert(delta).second) todo.push_back(delta);
    }
  }
  registry_.MarkUnusable(std::vector<ChunkHash>(marked.begin(), marked.end()));
  return Status::OK();
}

void RocksStore::NoteFailedRead(const ChunkHash& hash, const PackEntry& entry, ReadFailure failure) {
  if (read_only_) return;
  if (failure == ReadFailure::kContent) {
    static_cast<void>(MarkUnusableWithDeltas({hash}));
    return;
  }
  // A read error of the file (permission denied, EIO) is not damage by
  // itself; a pack that is missing or shorter than the chunk is.
  struct stat st;
  const std::string file = packs_->dir() + "/" + PackFileName(entry.pack);
  PackDamage damage{entry.pack, std::nullopt, entry.end()};
  if (::stat(file.c_str(), &st) == 0) {
    if (static_cast<uint64_t>(st.st_size) >= entry.end()) return;
    damage.size = static_cast<uint64_t>(st.st_size);
  } else if (errno != ENOENT) {
    return;
  }
  static_cast<void>(NoteDamage({damage}));
}

Result<std::vector<int64_t>> RocksStore::StepsWithUnusableChunks() {
  std::vector<int64_t> damaged;
  if (registry_.unusable() == 0) return damaged;
  rocksdb::ManagedSnapshot at(db_);
  rocksdb::ReadOptions ro;
  ro.snapshot = at.snapshot();
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListSteps(at.snapshot(), /*check_counts=*/false));
  auto uses_unusable = [&](const std::vector<TensorRecord>& records) {
    for (const TensorRecord& r : records) {
      for (const ChunkRef& c : r.chunks) {
        if (registry_.Unusable(c.hash)) return true;
      }
    }
    return false;
  };
  for (int64_t step : steps) {
    auto data = ReadSnapshotRecord(step, ro);
    if (!data.ok() || !data->has_value()) {
      damaged.push_back(step);
      continue;
    }
    bool bad = (*data)->shared.chunk && registry_.Unusable((*data)->shared.chunk->hash);
    for (const RecordGroupRef& group : (*data)->groups) bad = bad || registry_.Unusable(group.chunk.hash);
    if (!bad) {
      // Records that cannot be read (a record group in a lost pack) may
      // reference anything: the step is damaged.
      auto records = SnapshotTensors(**data, ro);
      bad = !records.ok() || uses_unusable(*records);
    }
    if (bad) damaged.push_back(step);
  }
  return damaged;
}

}  // namespace trainsnap::internal
