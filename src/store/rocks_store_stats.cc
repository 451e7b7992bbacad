// Stats: what the store holds and where its bytes are on disk.
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"

#include <algorithm>
#include <filesystem>

#include <rocksdb/metadata.h>

#include "store/chunk_codec.h"
#include "store/keys.h"
#include "store/rocksdb_status.h"

namespace trainsnap::internal {

Result<StoreStats> RocksStore::Stats(const ProgressFn& progress) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  const std::string context = "stats " + path_;
  StoreStats stats;
  auto list = ListLocked();
  if (!list.ok()) return list.status().WithContext(context);
  for (const SnapshotInfo& info : *list) {
    ++stats.snapshots;
    stats.logical_bytes += info.logical_bytes;
    stats.referenced_bytes += info.stored_bytes;
  }
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> live;
  Status s = CollectLiveChunks(&live);
  if (!s.ok()) return s.WithContext(context);
  uint64_t estimate = 0;
  db_->GetIntProperty(chunks_cf_, "rocksdb.estimate-num-keys", &estimate);
  uint64_t blob_values = 0;  // bytes the stored chunk values take in blob files (with record headers)
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), chunks_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto hash = DecodeChunkKey(std::string_view(it->key().data(), it->key().size()));
    if (!hash.ok()) return hash.status().WithContext(context);
    ++stats.chunks;
    if (progress) progress(stats.chunks, std::max(estimate, stats.chunks));
    const std::string_view value(it->value().data(), it->value().size());
    stats.chunk_stored_bytes += value.size();
    if (value.size() >= kMinBlobBytes) blob_values += value.size() + kBlobRecordOverhead;
    auto header = ParseChunkHeader(value);
    if (header.ok()) stats.chunk_raw_bytes += header->raw_bytes;
    if (!live.count(*hash)) {
      ++stats.collectable_chunks;
      stats.collectable_bytes += value.size();
    }
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), context + ": scan chunks"));
  rocksdb::ColumnFamilyMetaData meta;
  db_->GetColumnFamilyMetaData(chunks_cf_, &meta);
  for (const rocksdb::BlobMetaData& b : meta.blob_files) stats.blob_garbage_bytes += b.garbage_blob_bytes;
  uint64_t blob_files = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(path_, ec)) {
    std::error_code size_ec;
    const uint64_t size = e.is_regular_file(size_ec) ? e.file_size(size_ec) : 0;
    if (size_ec) continue;  // a file RocksDB removed while we listed
    stats.disk_bytes += size;
    const std::string ext = e.path().extension().string();
    if (ext == ".sst") {
      stats.sst_bytes += size;
    } else if (ext == ".blob") {
      stats.blob_bytes += size;
      ++blob_files;
    } else if (ext == ".log") {
      stats.wal_bytes += size;
    } else if (e.path().filename() == kReserveFile) {
      stats.reserve_bytes += size;
    } else {
      stats.other_bytes += size;
    }
  }
  if (ec) return Status::IOError(context + ": list " + path_ + ": " + ec.message());
  // Chunk values still in a memtable (not yet flushed) count as in blob
  // files here, so this is a lower bound.
  const uint64_t accounted = blob_files * kBlobFileOverhead + blob_values + stats.blob_garbage_bytes;
  stats.blob_uncompacted_bytes = stats.blob_bytes > accounted ? stats.blob_bytes - accounted : 0;
  return stats;
}

}  // namespace trainsnap::internal
