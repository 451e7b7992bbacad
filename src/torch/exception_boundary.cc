#include "torch/exception_boundary.h"

#include <exception>
#include <new>
#include <string>

#include <c10/util/Exception.h>

namespace trainsnap::internal {

Status CurrentExceptionStatus(const char* call) noexcept {
  const std::string thrower = call != nullptr ? std::string(call) + " threw" : std::string();
  std::string what;
  try {
    throw;
  } catch (const c10::Error& e) {
    what = std::string("LibTorch: ") + e.what_without_backtrace();
  } catch (const std::bad_alloc&) {
    what = "out of memory";
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    return Status::Aborted(call != nullptr ? thrower + " an exception that is not a std::exception"
                                           : "an exception that is not a std::exception was thrown");
  }
  return Status::Aborted(call != nullptr ? thrower + ": " + what : what);
}

}  // namespace trainsnap::internal
