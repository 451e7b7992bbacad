// The one place where an exception becomes a Status. LibTorch reports errors
// by throwing c10::Error, the allocator throws std::bad_alloc, and user code
// (Stateful, TensorStateful) may throw anything; no exception may leave the
// public API or a pipeline thread.
//
// Every exception is Aborted ("the operation could not finish", status.h).
// The errors a caller can cause (a frozen parameter with a gradient, a
// restore target that refuses in-place writes, a mismatched shape, ...) are
// checked before LibTorch runs and carry their own codes, so an exception
// that still comes out of LibTorch is a failure of the operation, not a
// verdict on the arguments; checkpointer.h gives user code's exceptions the
// same code. The message says what was thrown and nothing else: the caller
// adds its context (the step, the tensor) once, with Status::WithContext.
#pragma once

#include "trainsnap/status.h"

namespace trainsnap::internal {

// The Status of the exception being handled; call it only inside a catch
// block. Aborted with "LibTorch: <message, no backtrace>" (c10::Error), "out
// of memory" (std::bad_alloc), what() (any other std::exception), or "an
// exception that is not a std::exception was thrown". With `call` (the user
// callback that threw, e.g. "LoadState"): "<call> threw: <the same>", or
// "<call> threw an exception that is not a std::exception".
Status CurrentExceptionStatus(const char* call = nullptr) noexcept;

// fn() -> Status: its status, or CurrentExceptionStatus(call) when it throws.
template <class Fn>
Status ExceptionBoundary(Fn&& fn, const char* call = nullptr) noexcept {
  try {
    return fn();
  } catch (...) {
    return CurrentExceptionStatus(call);
  }
}

}  // namespace trainsnap::internal
