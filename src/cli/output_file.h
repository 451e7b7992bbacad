// The file an export writes (`--out`), replaced atomically and only where a
// regular file may be replaced. The bytes go to a unique temporary file in
// the target's directory, which Commit() syncs and renames over the target,
// so two exports to one path each rename a complete file: the target ends up
// as one of them, never a mix. An absent target or a regular file is
// replaced; a symbolic link to a regular file keeps the link and replaces
// the file it names; anything else (a directory, a device such as
// /dev/null, a FIFO, a socket, a link to one of those, a dangling link) is
// refused before anything is written, and re-checked just before the
// rename. POSIX has no "rename only over a regular file": a target swapped
// for something else between that check and the rename is not detected.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "trainsnap/status.h"

namespace trainsnap::cli {

// OK when `path` may be written by OutputFile::Create; InvalidArgument naming
// what is there otherwise. Creates nothing.
Status CheckOutputPath(const std::string& path);

class OutputFile {
 public:
  // Checks `path` as CheckOutputPath does, then creates the temporary file
  // (mode 0666 less the umask, as a new file gets).
  static Result<std::unique_ptr<OutputFile>> Create(const std::string& path);
  ~OutputFile();  // removes the temporary file unless Commit() succeeded
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  const std::string& temp_path() const { return temp_path_; }
  // Appends `bytes` bytes (all of them, or an IOError / NoSpace).
  Status Write(const void* data, size_t bytes);
  // fsync, re-check the target, rename over it, fsync its directory.
  Status Commit();

 private:
  OutputFile(std::string target, std::string temp_path, int fd);
  std::string target_;     // the resolved path that is replaced
  std::string temp_path_;
  int fd_;
  bool committed_ = false;
};

}  // namespace trainsnap::cli
