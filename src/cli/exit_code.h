// Exit codes of the `trainsnap` tool and its one-line error messages: part of
// its documented interface (docs/cli.md, "Exit codes"). Append only.
#pragma once

#include <string>

#include "trainsnap/status.h"

namespace trainsnap::cli {

enum class ExitCode : int {
  kOk = 0,
  kError = 1,       // any failure without a more specific code below
  kUsage = 2,       // bad command line, invalid argument, missing confirmation
  kCorruption = 3,  // stored bytes fail a hash/parse check (verify found problems)
  kNotFound = 4,    // no such store or step
  kBusy = 5,        // another process holds the store for writing
  kIOError = 6,     // a file could not be read or written (permission denied, a
                    // failing disk)
};

// The exit code for a command's final status: the only mapping the tool
// uses, one code per StatusCode (the table in docs/cli.md).
ExitCode ExitCodeFor(const Status& status);

// The line printed on stderr for a failed command:
// "trainsnap COMMAND: message" (no command: "trainsnap: message"). Line
// breaks become spaces, a leading context equal to the command's name is
// dropped (main() already names the command) and a context repeated back
// to back is shown once, so no layer's context appears twice in a row.
std::string ErrorLine(const std::string& command, const Status& status);

}  // namespace trainsnap::cli
