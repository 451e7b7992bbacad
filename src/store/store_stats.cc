#include "store/store_stats.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <unordered_map>

#include "store/garbage_collector.h"
#include "store/keys.h"
#include "store/pack_entry.h"
#include "store/pack_set.h"
#include "store/rocksdb_status.h"
#include "store/store_files.h"

namespace trainsnap::internal {

namespace fs = std::filesystem;

Result<StoreStats> CollectStats(DbSession& session, Catalog& catalog, ChunkStore& chunks, const ProgressFn& progress) {
  rocksdb::DB* const db = session.db();
  const std::string context = "stats " + session.path();
  StoreStats stats;
  auto list = catalog.ListInView();
  if (!list.ok()) return list.status().WithContext(context);
  for (const SnapshotInfo& info : *list) {
    ++stats.snapshots;
    stats.logical_bytes += info.logical_bytes;
    stats.referenced_bytes += info.stored_bytes;
  }
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> live;
  Status s = GarbageCollector(session, catalog, chunks).CollectLiveChunks(&live);
  if (!s.ok()) return s.WithContext(context);
  uint64_t estimate = 0;
  db->GetIntProperty(session.cf(ColumnFamily::kChunks), "rocksdb.estimate-num-keys", &estimate);
  std::map<uint32_t, uint64_t> referenced;  // pack -> bytes the index references in it
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), session.cf(ColumnFamily::kChunks)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto hash = DecodeChunkKey(std::string_view(it->key().data(), it->key().size()));
    if (!hash.ok()) return hash.status().WithContext(context);
    ++stats.chunks;
    if (progress) progress(stats.chunks, std::max(estimate, stats.chunks));
    auto entry = ParsePackEntry(std::string_view(it->value().data(), it->value().size()));
    if (!entry.ok()) return entry.status().WithContext(context + ": chunk " + hash->Hex());
    stats.chunk_stored_bytes += entry->length;
    stats.chunk_raw_bytes += entry->raw_bytes;
    referenced[entry->pack] += entry->length;
    if (!live.count(*hash)) {
      ++stats.collectable_chunks;
      stats.collectable_bytes += entry->length;
    }
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), context + ": scan chunks"));
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(session.path(), ec)) {
    std::error_code size_ec;
    const uint64_t size = e.is_regular_file(size_ec) ? e.file_size(size_ec) : 0;
    if (size_ec) continue;  // a file RocksDB removed while we listed
    stats.disk_bytes += size;
    const std::string ext = e.path().extension().string();
    if (ext == ".sst") {
      stats.sst_bytes += size;
    } else if (ext == ".log") {
      stats.wal_bytes += size;
    } else if (e.path().filename() == kReserveFile) {
      stats.reserve_bytes += size;
    } else {
      stats.other_bytes += size;
    }
  }
  if (ec) return Status::IOError(context + ": list " + session.path() + ": " + ec.message());
  auto packs = chunks.packs().List();
  if (!packs.ok()) return packs.status().WithContext(context);
  for (const auto& [pack, bytes] : referenced) {
    const bool present =
        std::any_of(packs->begin(), packs->end(), [pack = pack](const PackSet::FileInfo& f) { return f.pack == pack; });
    if (!present) {
      return Status::Corruption(context + ": pack file " + PackFileName(pack) + ", which the chunk index names, " +
                                "is missing (a file of the store)");
    }
  }
  for (const PackSet::FileInfo& f : *packs) {
    ++stats.packs;
    stats.pack_bytes += f.size;
    stats.disk_bytes += f.size;
    const uint64_t used = kPackHeaderBytes + referenced[f.pack];
    stats.pack_garbage_bytes += f.size > used ? f.size - used : 0;
  }
  return stats;
}
}  // namespace trainsnap::internal
