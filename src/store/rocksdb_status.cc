#include "store/rocksdb_status.h"

#include <string>

namespace trainsnap::internal {
namespace {

bool IsLockError(const rocksdb::Status& s) {
  // RocksDB reports a held LOCK file as IOError "lock hold by current process"
  // or "While lock file: .../LOCK: Resource temporarily unavailable".
  const std::string msg = s.ToString();
  return msg.find("LOCK") != std::string::npos || msg.find("lock hold") != std::string::npos;
}

}  // namespace

Status FromRocks(const rocksdb::Status& s, std::string_view context, std::string_view path) {
  if (s.ok()) return Status::OK();
  std::string msg(context);
  if (!msg.empty()) msg += ": ";
  msg += s.ToString();
  if (s.IsNoSpace()) return Status::NoSpace(std::move(msg));
  if (s.IsCorruption()) return Status::Corruption(std::move(msg));
  if (s.IsNotFound()) return Status::NotFound(std::move(msg));
  if (s.IsIOError()) {
    if (IsLockError(s)) {
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
