// Disk space: the reserve file and giving deleted chunks' space back.
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"

#include <algorithm>
#include <filesystem>
#include <fcntl.h>
#include <unistd.h>

#include <rocksdb/metadata.h>

#include "store/rocksdb_status.h"

namespace trainsnap::internal {

// --- disk space ------------------------------------------------------------------

void RocksStore::RestoreReserve() {
  if (read_only_ || options_.reserve_bytes == 0) return;
  const fs::path file = fs::path(path_) / kReserveFile;
  std::error_code ec;
  if (fs::exists(file, ec)) {
    reserve_present_ = true;
    return;
  }
  // Only with room to spare: the space a caller just freed goes to the next
  // snapshot first.
  const std::optional<uint64_t> free = FreeBytes(path_);
  if (!free || *free < 2 * options_.reserve_bytes) return;
  // Written under a temporary name and renamed: a crash never leaves a short
  // reserve file that looks complete.
  const std::string tmp = file.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  bool ok = ::posix_fallocate(fd, 0, static_cast<off_t>(options_.reserve_bytes)) == 0 && ::fsync(fd) == 0;
  ok = ::close(fd) == 0 && ok;
  if (ok) ok = ::rename(tmp.c_str(), file.c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  reserve_present_ = ok;
}

bool RocksStore::ReleaseReserve() {
  if (read_only_ || !reserve_present_) return false;
  reserve_present_ = false;
  std::error_code ec;
  return fs::remove(fs::path(path_) / kReserveFile, ec);
}

void RocksStore::UseReserveIfFull() {
  if (!reserve_present_) return;
  const std::optional<uint64_t> free = FreeBytes(path_);
  if (free && *free >= options_.reserve_bytes) return;
  ReleaseReserve();
}

Status RocksStore::ReclaimSpace() {
  // Flushing drops deleted values that are still in a memtable (they are
  // never written to a blob file) and lets the WAL files that hold them go.
  rocksdb::FlushOptions flush;
  flush.allow_write_stall = true;
  TRAINSNAP_RETURN_IF_ERROR(CheckWrite(db_->Flush(flush, handles_), "flush"));
  // Compacting the chunks' keys drops the references of deleted values:
  // RocksDB counts them as garbage of their blob files and deletes a blob
  // file once all of it is garbage. Only the keys are rewritten (small).
  rocksdb::CompactRangeOptions compact;
  compact.blob_garbage_collection_policy = rocksdb::BlobGarbageCollectionPolicy::kDisable;
  compact.allow_write_stall = true;
  TRAINSNAP_RETURN_IF_ERROR(CheckWrite(db_->CompactRange(compact, chunks_cf_, nullptr, nullptr), "compact chunks"));
  // The blob files that still hold live values keep their garbage until the
  // live values are relocated (rewritten). Done once the garbage exceeds
  // kMaxGarbageRatio of the live values, oldest files first, as many as the
  // free space allows.
  rocksdb::ColumnFamilyMetaData meta;
  db_->GetColumnFamilyMetaData(chunks_cf_, &meta);
  std::vector<const rocksdb::BlobMetaData*> files;
  uint64_t live = 0, garbage = 0;
  for (const rocksdb::BlobMetaData& b : meta.blob_files) {
    files.push_back(&b);
    live += b.total_blob_bytes - b.garbage_blob_bytes;
    garbage += b.garbage_blob_bytes;
  }
  live_blob_bytes_ = live;
  deleted_since_reclaim_ = 0;
  if (garbage == 0 || static_cast<double>(garbage) <= kMaxGarbageRatio * static_cast<double>(live)) {
    return Status::OK();
  }
  std::sort(files.begin(), files.end(), [](const rocksdb::BlobMetaData* a, const rocksdb::BlobMetaData* b) {
    return a->blob_file_number < b->blob_file_number;
  });
  // RocksDB relocates from the oldest floor(cutoff * files) blob files.
  const std::optional<uint64_t> free = FreeBytes(path_);
  uint64_t budget = free ? *free : 0;
  size_t oldest = 0;
  for (; oldest < files.size(); ++oldest) {
    const uint64_t relocated = files[oldest]->total_blob_bytes - files[oldest]->garbage_blob_bytes;
    if (relocated > budget) break;
    budget -= relocated;
  }
  if (oldest == 0) return Status::OK();
  compact.blob_garbage_collection_policy = rocksdb::BlobGarbageCollectionPolicy::kForce;
  compact.blob_garbage_collection_age_cutoff =
      oldest == files.size() ? 1.0 : (static_cast<double>(oldest) + 0.5) / static_cast<double>(files.size());
  // Relocation happens where a compaction reads the keys: also those
  // already in the last level.
  compact.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  TRAINSNAP_RETURN_IF_ERROR(CheckWrite(db_->CompactRange(compact, chunks_cf_, nullptr, nullptr), "relocate blobs"));
  db_->GetColumnFamilyMetaData(chunks_cf_, &meta);
  live = 0;
  for (const rocksdb::BlobMetaData& b : meta.blob_files) live += b.total_blob_bytes - b.garbage_blob_bytes;
  live_blob_bytes_ = live;
  return Status::OK();
}

Status RocksStore::GiveSpaceBack(std::shared_lock<std::shared_mutex>* view_lock) {
  Status s = ReclaimSpace();
  if (s.code() == StatusCode::kNoSpace) {
    // The failed flush or compaction stopped the database's writes: reopen
    // and try once more, with the reserve's space when one is left. Without
    // one the second try still gets what the reopen frees: closing waits for
    // RocksDB's background jobs and opening purges the files they left
    // obsolete (the first try failed now and then under load, when the
    // files freed by the previous delete were not yet gone).
    ReleaseReserve();
    view_lock->unlock();
    s = PrepareWrite();
    if (s.ok()) s = AcquireView(view_lock);
    if (s.ok() && txn_db_ == nullptr) s = recovery_error_;
    if (s.ok()) s = ReclaimSpace();
  }
  RestoreReserve();
  return s.WithContext("give space back");
}

}  // namespace trainsnap::internal
