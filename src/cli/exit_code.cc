#include "cli/exit_code.h"

#include <string_view>
#include <vector>

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
    case StatusCode::kIOError:
      return ExitCode::kIOError;
    case StatusCode::kContractMismatch:
    case StatusCode::kNoSpace:
    case StatusCode::kAborted:
    case StatusCode::kNotSupported:
    case StatusCode::kAlreadyExists:
      return ExitCode::kError;
  }
  return ExitCode::kError;  // a code appended to StatusCode later
}

std::string ErrorLine(const std::string& command, const Status& status) {
  std::string message = status.message();
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';  // one line on stderr, always
  }
  // Split on ": " into context segments; the last one is the cause.
  std::vector<std::string> segments;
  size_t begin = 0;
  for (;;) {
    size_t end = message.find(": ", begin);
    segments.push_back(message.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) break;
    begin = end + 2;
  }
  std::string line = command.empty() ? "trainsnap" : "trainsnap " + command;
  std::string_view previous = command;
  for (size_t i = 0; i < segments.size(); ++i) {
    const bool last = i + 1 == segments.size();
    if (!last && segments[i] == previous) continue;
    line += ": " + segments[i];
    previous = segments[i];
  }
  return line;
}

}  // namespace trainsnap::cli
