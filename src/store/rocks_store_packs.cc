// The store's pack files: opening them, recovery after a crash, and
// compaction (docs/format.md, "Pack files").
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"

#include <algorithm>
#include <map>
#include <set>

#include "store/kill_point.h"
#include "store/pack_entry.h"
#include "store/pack_set.h"
#include "store/rocksdb_status.h"

namespace trainsnap::internal {
namespace {

// Which chunks the index places in each pack.
struct PackUsage {
  uint64_t live = 0;  // encoded bytes of the index entries in the pack
  uint64_t end = 0;   // end of the last of them
  std::vector<std::pair<ChunkHash, PackEntry>> entries;
};

}  // namespace

Status RocksStore::OpenPacks() {
  fs_ = env_ != nullptr ? env_->GetFileSystem() : rocksdb::FileSystem::Default();
  auto packs = PackSet::Open(fs_.get(), path_, !read_only_, kPackTargetBytes, sync_);
  if (!packs.ok()) return packs.status().WithContext("open the pack files");
  packs_ = std::move(*packs);
  if (read_only_) return Status::OK();
  std::vector<PackDamage> damage;
  TRAINSNAP_RETURN_IF_ERROR(RecoverPacks(&damage).WithContext("recover the pack files"));
  // Writers must not deduplicate onto what a missing or cut pack lost.
  return NoteDamage(damage).WithContext("recover the pack files");
}

Status RocksStore::RecoverPacksBeforeOpen(const std::string& path, rocksdb::Env* env) {
  std::shared_ptr<rocksdb::FileSystem> fs = env != nullptr ? env->GetFileSystem() : rocksdb::FileSystem::Default();
  // The LOCK file RocksDB's writer holds: taken and released here, so a
  // writer that opens later finds the packs recovered, and none runs now.
  rocksdb::FileLock* lock = nullptr;
  TRAINSNAP_RETURN_IF_ERROR(
      FromRocks(fs->LockFile(path + "/LOCK", rocksdb::IOOptions(), &lock, nullptr), "lock the store", path));
  Status s;
  {
    RocksStore probe;
    probe.read_only_ = true;
    probe.env_ = env;
    probe.threads_ = 1;
    s = probe.OpenDb(path, StoreOptions(), /*read_only=*/true, env);
    if (s.ok()) {
      probe.fs_ = fs;
      auto packs = PackSet::Open(fs.get(), path, /*writable=*/true, kPackTargetBytes);
      if (packs.ok()) {
        probe.packs_ = std::move(*packs);
        s = probe.RecoverPacks();
      } else {
        s = packs.status();
      }
    }
  }
  rocksdb::IOStatus unlocked = fs->UnlockFile(lock, rocksdb::IOOptions(), nullptr);
  TRAINSNAP_RETURN_IF_ERROR(s.WithContext("recover the pack files"));
  return FromRocks(unlocked, "unlock the store");
}

Status RocksStore::RecoverPacks(std::vector<PackDamage>* damage) {
  std::map<uint32_t, uint64_t> ends;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), chunks_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto entry = ParsePackEntry(std::string_view(it->value().data(), it->value().size()));
    // A damaged entry might name bytes that a truncation would destroy.
    if (!entry.ok()) return Status::OK();
    uint64_t& end = ends[entry->pack];
    end = std::max(end, entry->end());
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan the chunk index"));
  if (!ends.empty()) packs_->ReserveNumbers(ends.rbegin()->first);
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<PackSet::FileInfo> files, packs_->List());
  if (damage != nullptr) *damage = FindPackDamage(ends, files);
  for (const PackSet::FileInfo& f : files) {
    auto used = ends.find(f.pack);
    if (used == ends.end()) {
      // No committed chunk in it: a capture's that never committed, or a
      // pack that compaction had emptied when the process stopped.
      TRAINSNAP_RETURN_IF_ERROR(packs_->Remove(f.pack));
    } else if (f.size > used->second) {
      // Bytes appended after the last committed chunk: never referenced.
      TRAINSNAP_RETURN_IF_ERROR(packs_->Truncate(f.pack, used->second));
    }
  }
  return Status::OK();
}

Status RocksStore::CompactPacks(GcReport* report) {
  GcReport ignored;
  if (report == nullptr) report = &ignored;
  std::map<uint32_t, PackUsage> usage;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), chunks_cf_));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      TRAINSNAP_ASSIGN_OR_RETURN(ChunkHash hash,
                                 DecodeChunkKey(std::string_view(it->key().data(), it->key().size())));
      // A damaged entry might place a live chunk anywhere: move nothing.
      auto entry = ParsePackEntry(std::string_view(it->value().data(), it->value().size()));
      if (!entry.ok()) return entry.status().WithContext("compact packs: chunk " + hash.Hex() + ", refusing");
      PackUsage& u = usage[entry->pack];
      u.live += entry->length;
      u.end = std::max(u.end, entry->end());
      u.entries.emplace_back(hash, *entry);
    }
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "compact packs: scan the chunk index"));
  }
  live_pack_bytes_ = 0;
  std::map<uint32_t, uint64_t> ends;
  for (const auto& [pack, u] : usage) {
    live_pack_bytes_ += u.live;
    ends[pack] = u.end;
  }
  // Packs writers may still append to or commit from stay: every one from
  // the oldest floor of a live writer (or in-flight chunk) on. The active pack is ended here
  // (later captures append to a new one), so that once its writers are gone
  // the next compaction may take it; unsynced bytes in it are a live
  // writer's, whose floor keeps it.
  packs_->Rotate();
  // Closes the rotated pack (its bytes are a dead writer's or synced); a
  // failure only leaves it to the next compaction.
  static_cast<void>(packs_->Sync());
  uint32_t floor = packs_->NextAppendPack();
  {
    MutexLock lock(&floors_mu_);
    if (!writer_floors_.empty()) floor = std::min(floor, *writer_floors_.begin());
  }
  // A live writer may commit another's in-flight chunk from a pack below
  // its own floor (the appender may be gone): that pack stays too.
  if (std::optional<uint32_t> in_flight = registry_.OldestInFlightPack()) floor = std::min(floor, *in_flight);
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<PackSet::FileInfo> files, packs_->List());
  // A missing or cut pack is left as it is: its chunks cannot be copied,
  // and a pack file brought back from a copy makes them whole again.
  const std::vector<PackDamage> damage = FindPackDamage(ends, files);
  std::set<uint32_t> damaged;
  report->damaged_packs.clear();
  for (const PackDamage& d : damage) {
    damaged.insert(d.pack);
    report->damaged_packs.push_back(d.Describe());
  }
  TRAINSNAP_RETURN_IF_ERROR(NoteDamage(damage).WithContext("compact packs"));
  std::vector<PackSet::FileInfo> empty, tails, sparse;
  for (PackSet::FileInfo f : files) {
    if (f.pack >= floor || damaged.count(f.pack) > 0) continue;
    auto u = usage.find(f.pack);
    if (u == usage.end()) {
      empty.push_back(f);
      continue;
    }
    if (f.size > u->second.end && !packs_->IsOpen(f.pack)) {
      // A failed or abandoned capture's bytes after the last indexed chunk:
      // given back without copying anything (a full disk has no room for
      // copies). No live writer can commit them (the floor).
      tails.push_back(f);
      f.size = u->second.end;
    }
    const uint64_t chunk_bytes = f.size > kPackHeaderBytes ? f.size - kPackHeaderBytes : 0;
    if (static_cast<double>(u->second.live) < kCompactBelow * static_cast<double>(chunk_bytes)) {
      sparse.push_back(f);
    }
  }
  if (!empty.empty() || !tails.empty()) {
    // The deletions of index entries in these bytes must be durable before
    // the bytes go: a power loss must not bring back an entry pointing nowhere.
    TRAINSNAP_RETURN_IF_ERROR(CheckWrite(db_->FlushWAL(/*sync=*/true), "compact packs: sync the WAL"));
    for (const PackSet::FileInfo& f : empty) {
      TRAINSNAP_RETURN_IF_ERROR(packs_->Remove(f.pack).WithContext("compact packs"));
      ++report->packs_removed;
      report->pack_bytes_freed += f.size;
    }
    for (const PackSet::FileInfo& f : tails) {
      const uint64_t end = usage.at(f.pack).end;
      TRAINSNAP_RETURN_IF_ERROR(packs_->Truncate(f.pack, end).WithContext("compact packs"));
      report->pack_bytes_freed += f.size - end;
    }
  }
  // Rewriting needs room for the copies: as many packs as the free space holds.
  const std::optional<uint64_t> free = FreeBytes(path_);
  uint64_t budget = free ? *free : 0;
  for (const PackSet::FileInfo& f : sparse) {
    const PackUsage& u = usage.at(f.pack);
    if (u.live > budget) break;
    budget -= u.live;
    const std::string context = "compact " + PackFileName(f.pack);
    rocksdb::WriteBatch batch;
    std::string value;
    Status unreadable;
    for (const auto& [hash, entry] : u.entries) {
      unreadable = packs_->ReadEncoded(entry, &value);
      if (!unreadable.ok()) {
        NoteFailedRead(hash, entry, ReadFailure::kPack);
        unreadable = unreadable.WithContext("chunk " + hash.Hex());
        break;
      }
      auto moved = packs_->Append(value, entry.raw_bytes, entry.raw);
      if (!moved.ok()) return moved.status().WithContext(context);
      TRAINSNAP_RETURN_IF_ERROR(
          FromRocks(batch.Put(chunks_cf_, EncodeChunkKey(hash), EncodePackEntry(*moved)), context));
    }
    if (!unreadable.ok()) {
      // The pack stays as it is (the copies made so far are garbage for a
      // later compaction); the other packs are still compacted.
      report->damaged_packs.push_back(std::string(kPackDir) + "/" + PackFileName(f.pack) +
                                      " was not compacted: " + unreadable.ToString());
      continue;
    }
    TRAINSNAP_KILL_POINT(kKillCompactCopied);
    TRAINSNAP_RETURN_IF_ERROR(packs_->Sync().WithContext(context));
    TRAINSNAP_KILL_POINT(kKillCompactSynced);
    rocksdb::WriteOptions wo;
    wo.sync = true;
    TRAINSNAP_RETURN_IF_ERROR(CheckWrite(db_->Write(wo, &batch), context + ": move the index entries"));
    TRAINSNAP_KILL_POINT(kKillCompactIndexed);
    TRAINSNAP_RETURN_IF_ERROR(packs_->Remove(f.pack).WithContext(context));
    ++report->packs_removed;
    report->pack_bytes_rewritten += u.live;
    report->pack_bytes_freed += f.size - u.live;
  }
  return Status::OK();
}

}  // namespace trainsnap::internal
