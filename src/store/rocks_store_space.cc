// Disk space: the reserve file and giving deleted chunks' space back.
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"

#include <algorithm>
#include <filesystem>
#include <fcntl.h>
#include <unistd.h>

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

Status RocksStore::ReclaimSpace(GcReport* report) {
  // The packs first: removing packs without live chunks needs no space,
  // which a full disk lacks.
  TRAINSNAP_RETURN_IF_ERROR(CompactPacks(report));
  deleted_since_reclaim_ = 0;
  // Flushing lets the WAL files that hold deleted index entries go; compacting
  // the index drops their tombstones. Both small.
  rocksdb::FlushOptions flush;
  flush.allow_write_stall = true;
  TRAINSNAP_RETURN_IF_ERROR(CheckWrite(db_->Flush(flush, handles_), "flush"));
  rocksdb::CompactRangeOptions compact;
  compact.allow_write_stall = true;
  return CheckWrite(db_->CompactRange(compact, chunks_cf_, nullptr, nullptr), "compact the chunk index");
}

Status RocksStore::GiveSpaceBack(std::shared_lock<std::shared_mutex>* view_lock, GcReport* report) {
  Status s = ReclaimSpace(report);
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
    if (s.ok()) s = ReclaimSpace(report);
  }
  RestoreReserve();
  return s.WithContext("give space back");
}

}  // namespace trainsnap::internal
