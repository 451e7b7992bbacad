#include "store/creation_marker.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string_view>
#include <vector>

#include "store/commit_log.h"
#include "store/errno_status.h"
#include "store/pack_set.h"
#include "store/store_files.h"

namespace trainsnap::internal {
namespace {

std::string MarkerPath(const std::string& dir) { return dir + "/" + kCreationMarker; }

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }
bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The files RocksDB writes into a database directory while creating one
// (rocksdb/file/filename.cc names them): CURRENT and its temporary copy,
// IDENTITY, LOCK, the info log, MANIFEST and OPTIONS files, WAL, table and
// blob files.
bool IsRocksDbFile(std::string_view name) {
  return name == "CURRENT" || name == "IDENTITY" || name == "LOCK" || name == "LOG" || StartsWith(name, "LOG.old.") ||
         StartsWith(name, "MANIFEST-") || StartsWith(name, "OPTIONS-") || EndsWith(name, ".log") ||
         EndsWith(name, ".sst") || EndsWith(name, ".blob") || EndsWith(name, ".dbtmp");
}

// The entries of `dir`, sorted ("." and ".." left out).
Result<std::vector<std::string>> ListDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus("list", dir);
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  const int error = errno;
  ::closedir(d);
  if (error != 0) return ErrnoStatus("list", dir, error);
  std::sort(names.begin(), names.end());
  return names;
}

Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open directory", dir);
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  return rc == 0 ? Status::OK() : ErrnoStatus("sync directory", dir, error);
}

}  // namespace

Result<CreationState> InspectCreation(const std::string& dir) {
  const std::string path = MarkerPath(dir);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return CreationState::kNone;
    return ErrnoStatus("open", path);
  }
  // A shared lock conflicts only with the creator's exclusive one.
  const int rc = ::flock(fd, LOCK_SH | LOCK_NB);
  const int error = errno;
  ::close(fd);
  if (rc == 0) return CreationState::kInterrupted;
  if (error == EWOULDBLOCK) return CreationState::kRunning;
  return ErrnoStatus("lock", path, error);
}

Status InterruptedCreation(const std::string& what) {
  return Status::NotFound(what + ": store creation was interrupted (" + kCreationMarker +
                          " is left in the directory): it holds no snapshot yet; the next writable "
                          "open with "
                          "create_if_missing (a training run's Store::Open) creates it again");
}

Result<std::unique_ptr<CreationMarker>> CreationMarker::Acquire(const std::string& dir) {
  const std::string path = MarkerPath(dir);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("create", path);
  std::unique_ptr<CreationMarker> marker(new CreationMarker(dir, fd));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return Status::Busy("store " + dir + " is being created by another process (it holds " + kCreationMarker +
                          "); open it once that process has");
    }
    return ErrnoStatus("lock", path);
  }
  // The file locked must still be the marker: a creator that finished
  // meanwhile removed the one this process opened, and the directory then
  // holds a whole store.
  struct stat held, named;
  if (::fstat(fd, &held) != 0) return ErrnoStatus("stat", path);
  if (::stat(path.c_str(), &named) != 0 || held.st_ino != named.st_ino || held.st_dev != named.st_dev) {
    return Status::Aborted("store " + dir + ": another process finished creating it meanwhile");
  }
  // Its content is for whoever finds the marker: which process wrote it.
  const std::string note = "trainsnap store creation by process " + std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, note.data(), note.size(), 0) != static_cast<ssize_t>(note.size())) {
    return ErrnoStatus("write", path);
  }
  if (::fsync(fd) != 0) return ErrnoStatus("sync", path);
  TRAINSNAP_RETURN_IF_ERROR(SyncDir(dir));
  return marker;
}

CreationMarker::~CreationMarker() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

Status CreationMarker::ClearLeftovers(size_t* removed) {
  *removed = 0;
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir_));
  const std::string packs = dir_ + "/" + kPackDir;
  std::vector<std::string> files, pack_files, foreign;
  bool has_packs = false;
  for (const std::string& name : names) {
    if (name == kCreationMarker) continue;
    if (name == kPackDir) {
      has_packs = true;
      TRAINSNAP_ASSIGN_OR_RETURN(std::vector<std::string> inside, ListDir(packs));
      for (const std::string& p : inside) {
        (ParsePackFileName(p) ? pack_files : foreign).push_back(std::string(kPackDir) + "/" + p);
      }
    } else if (IsRocksDbFile(name) || name == CommitLog::kFileName || name == kReserveFile ||
               name == kReserveTempFile) {
      files.push_back(name);
    } else {
      foreign.push_back(name);
    }
  }
  if (!foreign.empty()) {
    std::string listed;
    for (size_t i = 0; i < foreign.size() && i < 3; ++i) listed += (i ? ", `" : "`") + foreign[i] + "`";
    if (foreign.size() > 3) listed += ", ...";
    return Status::NotSupported("store " + dir_ + ": its creation was interrupted, but the directory also holds " +
                                listed +
                                ", which no creation writes: nothing was removed; move those away, or "
                                "remove the directory");
  }
  for (const std::string& name : pack_files) files.push_back(name);
  for (const std::string& name : files) {
    const std::string path = dir_ + "/" + name;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("remove", path);
    ++*removed;
  }
  if (has_packs) {
    if (::rmdir(packs.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("remove", packs);
    ++*removed;
  }
  return SyncDir(dir_);
}

Status CreationMarker::Finish() {
  const std::string path = MarkerPath(dir_);
  if (::unlink(path.c_str()) != 0) return ErrnoStatus("remove", path);
  return SyncDir(dir_);
}

}  // namespace trainsnap::internal
