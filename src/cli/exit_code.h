// Exit codes of the `trainsnap` tool: part of its documented interface
// (docs/cli.md). Append only.
#pragma once

#include "trainsnap/status.h"

namespace trainsnap::cli {

enum class ExitCode : int {
  kOk = 0,
  kError = 1,       // any failure without a more specific code below
  kUsage = 2,       // bad command line, invalid argument, missing confirmation
  kCorruption = 3,  // stored bytes fail a hash/parse check (verify found problems)
  kNotFound = 4,    // no such store or step
  kBusy = 5,        // another process holds the store for writing
};

// The exit code for a command's final status.
ExitCode ExitCodeFor(const Status& status);

}  // namespace trainsnap::cli
