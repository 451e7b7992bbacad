#include "trainsnap/status.h"

#include <cstdio>
#include <cstdlib>

namespace trainsnap {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kContractMismatch: return "ContractMismatch";
    case StatusCode::kIOError: return "IOError";
    case StatusCode::kNoSpace: return "NoSpace";
    case StatusCode::kBusy: return "Busy";
    case StatusCode::kAborted: return "Aborted";
    case StatusCode::kNotSupported: return "NotSupported";
    case StatusCode::kAlreadyExists: return "AlreadyExists";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  if (!message_.empty()) {
    m += ": ";
    m += message_;
  }
  return Status(code_, std::move(m));
}

namespace internal {
void DieOnBadResultAccess(const Status& status) {
  std::fprintf(stderr, "trainsnap: value() of a failed Result: %s\n", status.ToString().c_str());
  std::abort();
}
}  // namespace internal

}  // namespace trainsnap
