// Free disk space, as the store's maintenance and reserve see it.
#pragma once

#include <sys/statvfs.h>

#include <cstdint>
#include <optional>
#include <string>

namespace trainsnap::internal {

// Free bytes for an unprivileged writer on the file system of `path`; nullopt
// when statvfs fails.
inline std::optional<uint64_t> FreeBytes(const std::string& path) {
  struct statvfs st;
  if (::statvfs(path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
}

}  // namespace trainsnap::internal
