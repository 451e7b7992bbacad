#include "cli/standard_output.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

namespace trainsnap::cli {

namespace {

// errno of the first failure seen, so that a later check still names it.
int first_error = 0;

Status Failed(int error) {
  if (first_error == 0) first_error = error;
  std::string cause = first_error != 0 ? std::strerror(first_error) : "write error";
  return first_error == ENOSPC ? Status::NoSpace("write to standard output: " + cause)
                               : Status::IOError("write to standard output: " + cause);
}

// The stream failed in an earlier write whose errno has since been
// overwritten: one more byte on the broken output says why (ENOSPC, EIO, ...).
int ProbeError() {
  std::clearerr(stdout);
  errno = 0;
  if (std::fputc('\n', stdout) == EOF || std::fflush(stdout) != 0) return errno;
  return 0;
}

}  // namespace

Status FlushStdout() {
  errno = 0;
  std::cout.flush();
  const int flush_error = errno;
  if (std::fflush(stdout) != 0) return Failed(errno != 0 ? errno : flush_error);
  if (!std::cout.good() || std::ferror(stdout) != 0) return Failed(flush_error != 0 ? flush_error : ProbeError());
  return Status::OK();
}

Status CloseStdout() {
  Status flushed = FlushStdout();
  errno = 0;
  const bool closed = std::fclose(stdout) == 0;
  if (!flushed.ok()) return flushed;
  if (!closed) return Failed(errno);
  return Status::OK();
}

}  // namespace trainsnap::cli
