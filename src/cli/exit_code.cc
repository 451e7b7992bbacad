#include "cli/exit_code.h"

namespace trainsnap::cli {

ExitCode ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return ExitCode::kOk;
    case StatusCode::kInvalidArgument:
      return ExitCode::kUsage;
    case StatusCode::kCorruption:
      return ExitCode::kCorruption;
    case StatusCode::kNotFound:
      return ExitCode::kNotFound;
    case StatusCode::kBusy:
      return ExitCode::kBusy;
    default:
      return ExitCode::kError;
  }
}

}  // namespace trainsnap::cli
