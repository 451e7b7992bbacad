// Mutex and MutexLock: std::mutex and std::unique_lock with the thread-safety
// annotations that libstdc++'s own types lack, so that clang can check the
// GUARDED_BY members they protect (common/thread_annotations.h).
#pragma once

#include <condition_variable>
#include <mutex>

#include "common/thread_annotations.h"

namespace trainsnap::internal {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction. Wait() releases it while
// blocked on `cv` and holds it again on return (std::condition_variable::wait,
// spurious wake-ups included: call it in a loop on the awaited condition).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : lock_(mu->mu_) {}
  ~MutexLock() RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Wait(std::condition_variable& cv) { cv.wait(lock_); }
  // Releases the mutex until Lock (the destructor releases only a held one).
  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace trainsnap::internal
