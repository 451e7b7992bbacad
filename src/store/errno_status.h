// The one place where an errno becomes a trainsnap::Status, for the store's
// own files (the commit log, the creation marker): ENOSPC is NoSpace, every
// other error IOError, the message "<what> <path>: <strerror>".
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

#include "trainsnap/status.h"

namespace trainsnap::internal {

inline Status ErrnoStatus(const std::string& what, const std::string& path, int error = errno) {
  std::string msg = what + " " + path + ": " + std::strerror(error);
  if (error == ENOSPC) return Status::NoSpace(std::move(msg));
  return Status::IOError(std::move(msg));
}

}  // namespace trainsnap::internal
