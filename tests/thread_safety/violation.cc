// Input of thread_safety_check_detects_a_violation: Unguarded() writes a
// GUARDED_BY member without its mutex, which the check must report.
#include "common/mutex.h"

namespace trainsnap::internal {

class Counter {
 public:
  void Guarded() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    ++count_;
  }
  void Unguarded() { ++count_; }

 private:
  Mutex mu_;
  int count_ GUARDED_BY(mu_) = 0;
};

}  // namespace trainsnap::internal
