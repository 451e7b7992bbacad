#include "cli/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

namespace trainsnap::cli {

namespace {

Status ErrnoStatus(const std::string& what, int error) {
  std::string message = what + ": " + std::strerror(error);
  return error == ENOSPC ? Status::NoSpace(message) : Status::IOError(message);
}

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

Status Refuse(const std::string& path, const std::string& what) {
  return Status::InvalidArgument("--out `" + path + "` is " + what +
                                 ": export replaces only a regular file (or creates one); nothing was written");
}

std::string DirectoryOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The path to replace: `path` itself, or the regular file a symbolic link
// at `path` names.
Result<std::string> ResolveTarget(const std::string& path) {
  if (path.empty()) return Status::InvalidArgument("--out is empty");
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    const int error = errno;
    struct stat dir;
    if (error == ENOENT && ::stat(DirectoryOf(path).c_str(), &dir) == 0 && S_ISDIR(dir.st_mode)) {
      return path;  // a new file, created by the rename
    }
    if (error == ENOENT || error == ENOTDIR) {
      return Status::InvalidArgument("--out `" + path + "`: directory `" + DirectoryOf(path) +
                                     "` does not exist; nothing was written");
    }
    return ErrnoStatus("--out `" + path + "`", error);
  }
  if (S_ISREG(st.st_mode)) return path;
  if (!S_ISLNK(st.st_mode)) return Refuse(path, KindOf(st.st_mode));
  struct stat target;
  if (::stat(path.c_str(), &target) != 0) {
    if (errno == ENOENT) return Refuse(path, "a dangling symbolic link");
    return ErrnoStatus("--out `" + path + "`", errno);
  }
  if (!S_ISREG(target.st_mode)) return Refuse(path, std::string("a symbolic link to ") + KindOf(target.st_mode));
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) return ErrnoStatus("resolve --out `" + path + "`", errno);
  return std::string(resolved);
}

}  // namespace

Status CheckOutputPath(const std::string& path) { return ResolveTarget(path).status(); }

Result<std::unique_ptr<OutputFile>> OutputFile::Create(const std::string& path) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::string target, ResolveTarget(path));
  // Hidden, in the target's directory (rename never crosses file systems),
  // unique per process and attempt; O_EXCL never opens an existing file.
  std::random_device seed;
  std::mt19937_64 rng((static_cast<uint64_t>(seed()) << 32) ^ static_cast<uint64_t>(::getpid()));
  const std::string prefix = DirectoryOf(target) + "/." + BaseOf(target) + ".tmp-" + std::to_string(::getpid()) + "-";
  for (int attempt = 0; attempt < 100; ++attempt) {
    char suffix[17];
    std::snprintf(suffix, sizeof(suffix), "%016llx", static_cast<unsigned long long>(rng()));
    std::string temp = prefix + suffix;
    int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return std::unique_ptr<OutputFile>(new OutputFile(std::move(target), std::move(temp), fd));
    if (errno != EEXIST) return ErrnoStatus("create a temporary file next to `" + target + "`", errno);
  }
  return Status::IOError("create a temporary file next to `" + target + "`: every name tried exists");
}

OutputFile::OutputFile(std::string target, std::string temp_path, int fd)
    : target_(std::move(target)), temp_path_(std::move(temp_path)), fd_(fd) {}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

Status OutputFile::Write(const void* data, size_t bytes) {
  if (fd_ < 0) return Status::Aborted("write `" + temp_path_ + "`: already closed");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write `" + temp_path_ + "`", errno);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return Status::OK();
}

Status OutputFile::Commit() {
  if (fd_ < 0) return Status::Aborted("commit `" + temp_path_ + "`: already closed");
  if (::fsync(fd_) != 0) return ErrnoStatus("sync `" + temp_path_ + "`", errno);
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) return ErrnoStatus("close `" + temp_path_ + "`", errno);
  // The target may have changed while the data was written.
  auto again = ResolveTarget(target_);
  if (!again.ok()) return again.status();
  if (::rename(temp_path_.c_str(), again->c_str()) != 0) return ErrnoStatus("rename to `" + *again + "`", errno);
  committed_ = true;
  int dir = ::open(DirectoryOf(*again).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return ErrnoStatus("open the directory of `" + *again + "` to sync it", errno);
  rc = ::fsync(dir);
  int error = errno;
  ::close(dir);
  // Some file systems cannot sync a directory (EINVAL): the rename stands.
  if (rc != 0 && error != EINVAL) return ErrnoStatus("sync the directory of `" + *again + "`", error);
  return Status::OK();
}

}  // namespace trainsnap::cli
