#include "store/space_reserve.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <optional>

#include "store/disk_space.h"
#include "store/kill_point.h"
#include "store/store_files.h"

namespace trainsnap::internal {

namespace fs = std::filesystem;

void SpaceReserve::Restore() {
  const std::string tmp = (fs::path(dir_) / kReserveTempFile).string();
  std::error_code ec;
  // A reserve whose writing was killed before its rename: never whole, so
  // never used; its space is given back whatever follows (a full disk or
  // reserve_bytes 0 would otherwise keep it forever).
  fs::remove(tmp, ec);
  if (bytes_ == 0) return;
  const fs::path file = fs::path(dir_) / kReserveFile;
  if (fs::exists(file, ec)) {
    present_ = true;
    return;
  }
  // Only with room to spare: the space a caller just freed goes to the next
  // snapshot first.
  const std::optional<uint64_t> free = FreeBytes(dir_);
  if (!free || *free < 2 * bytes_) return;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  bool ok = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes_)) == 0 && ::fsync(fd) == 0;
  ok = ::close(fd) == 0 && ok;
  if (ok) TRAINSNAP_KILL_POINT(kKillReserveWritten);
  if (ok) ok = ::rename(tmp.c_str(), file.c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  present_ = ok;
}

bool SpaceReserve::Release() {
  if (!present_) return false;
  present_ = false;
  std::error_code ec;
  return fs::remove(fs::path(dir_) / kReserveFile, ec);
}

void SpaceReserve::UseIfFull() {
  if (!present_) return;
  const std::optional<uint64_t> free = FreeBytes(dir_);
  if (free && *free >= bytes_) return;
  Release();
}

}  // namespace trainsnap::internal
