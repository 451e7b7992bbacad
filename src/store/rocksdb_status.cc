#include "store/rocksdb_status.h"

#include <string>

namespace trainsnap::internal {
namespace {

// RocksDB 7.8 (PosixFileSystem::LockFile) reports the store's LOCK file held
// as IOError "lock hold by current process, ...: <path>/LOCK" (this process)
// or "While lock file: <path>/LOCK: <strerror>" (fcntl F_SETLK refused: another
// process holds it). Failing to open the LOCK file ("While open a file for
// lock: <path>/LOCK: Permission denied") is not a held lock; neither is any
// other file whose name contains "LOCK".
bool IsLockHeld(const rocksdb::Status& s, std::string_view path) {
  const std::string msg = s.ToString();
  const bool held = msg.find("lock hold by current process") != std::string::npos ||
                    msg.find("While lock file: ") != std::string::npos;
  if (!held) return false;
  if (path.empty()) return true;
  std::string lock_file(path);
  while (lock_file.size() > 1 && lock_file.back() == '/') lock_file.pop_back();
  lock_file += "/LOCK";
  return msg.find(lock_file) != std::string::npos;
}

}  // namespace

Status FromRocks(const rocksdb::Status& s, std::string_view context, std::string_view path) {
  if (s.ok()) return Status::OK();
  std::string msg(context);
  if (!msg.empty()) msg += ": ";
  msg += s.ToString();
  if (s.IsNoSpace()) return Status::NoSpace(std::move(msg));
  if (s.IsCorruption()) return Status::Corruption(std::move(msg));
  // A file RocksDB's MANIFEST (or CURRENT) names is gone: the store is
  // damaged, like a table file that fails its checksum.
  if (s.IsPathNotFound()) return Status::Corruption(msg + " (a file of the store is missing)");
  if (s.IsNotFound()) return Status::NotFound(std::move(msg));
  if (s.IsIOError()) {
    if (IsLockHeld(s, path)) {
      std::string busy(context);
      if (!busy.empty()) busy += ": ";
      busy += "store " + std::string(path) + " is held by another writer (" + s.ToString() + ")";
      return Status::Busy(std::move(busy));
    }
    return Status::IOError(std::move(msg));
  }
  if (s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) return Status::Busy(std::move(msg));
  if (s.IsInvalidArgument()) return Status::InvalidArgument(std::move(msg));
  if (s.IsNotSupported()) return Status::NotSupported(std::move(msg));
  return Status::Aborted(std::move(msg));
}

}  // namespace trainsnap::internal
