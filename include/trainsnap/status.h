// Status and Result<T>: how every public trainsnap call reports success or a
// typed error. No exception escapes the public API.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "trainsnap/export.h"

namespace trainsnap {

// A small, stable set of codes that callers branch on. Values are part of the
// CLI's documented exit/JSON schema: append only.
enum class StatusCode : int {
  kOk = 0,
  kNotFound = 1,          // no such store, step, tensor or chunk
  kCorruption = 2,        // stored bytes fail a hash or parse check
  kInvalidArgument = 3,   // the caller passed something unusable
  kContractMismatch = 4,  // a snapshot does not fit the target (names, shapes, base)
  kIOError = 5,           // the file system failed
  kNoSpace = 6,           // the disk is full
  kBusy = 7,              // another process holds the store for writing
  kAborted = 8,           // the operation was cancelled or could not finish
  kNotSupported = 9,      // a valid request trainsnap cannot serve (yet)
  kAlreadyExists = 10,    // e.g. committing a step that is already stored
};

// Name of a code, e.g. "Corruption".
TRAINSNAP_EXPORT std::string_view StatusCodeName(StatusCode code);

// The outcome of an operation. Cheap to copy when OK. Thread-compatible.
class TRAINSNAP_EXPORT [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status ContractMismatch(std::string m) { return {StatusCode::kContractMismatch, std::move(m)}; }
  static Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
  static Status NoSpace(std::string m) { return {StatusCode::kNoSpace, std::move(m)}; }
  static Status Busy(std::string m) { return {StatusCode::kBusy, std::move(m)}; }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status NotSupported(std::string m) { return {StatusCode::kNotSupported, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "Corruption: restore step 12: chunk 9f3a...: hash mismatch"; "OK" when ok().
  std::string ToString() const;

  // Returns this status with "context: " prepended to the message (no-op if OK).
  Status WithContext(std::string_view context) const;

  bool operator==(const Status& other) const {
    return code_ == other.code_ && message_ == other.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Either a value or a non-OK Status. Accessing value() of an error is a bug:
// it aborts the process, in every build, printing the status to stderr.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}                   // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) { Normalize(); }  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & { return Check(), *value_; }
  const T& value() const& { return Check(), *value_; }
  T&& value() && { return Check(), std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  // The value, or `fallback` on error.
  T value_or(T fallback) const& { return ok() ? *value_ : std::move(fallback); }

 private:
  void Normalize() {
    // A Result built from an OK status without a value is a programming error;
    // turn it into a visible one instead of undefined behaviour.
    if (status_.ok()) status_ = Status::Aborted("Result constructed from OK status without a value");
  }
  void Check() const;

  Status status_;
  std::optional<T> value_;
};

namespace internal {
[[noreturn]] TRAINSNAP_EXPORT void DieOnBadResultAccess(const Status& status);
}  // namespace internal

template <class T>
void Result<T>::Check() const {
  if (!value_.has_value()) internal::DieOnBadResultAccess(status_);
}

}  // namespace trainsnap

// Propagation helpers, in the style of Arrow's ARROW_RETURN_NOT_OK.
#define TRAINSNAP_CONCAT_INNER(a, b) a##b
#define TRAINSNAP_CONCAT(a, b) TRAINSNAP_CONCAT_INNER(a, b)

#define TRAINSNAP_RETURN_IF_ERROR(expr)               \
  do {                                                \
    ::trainsnap::Status _ts_status = (expr);          \
    if (!_ts_status.ok()) return _ts_status;          \
  } while (0)

#define TRAINSNAP_ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                    \
  if (!tmp.ok()) return tmp.status();                    \
  lhs = std::move(tmp).value()

#define TRAINSNAP_ASSIGN_OR_RETURN(lhs, rexpr) \
  TRAINSNAP_ASSIGN_OR_RETURN_IMPL(TRAINSNAP_CONCAT(_ts_result_, __LINE__), lhs, rexpr)
