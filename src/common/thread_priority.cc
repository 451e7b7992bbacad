#include "common/thread_priority.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>

#include <boost/asio/post.hpp>

namespace trainsnap::internal {

namespace {

// With PRIO_PROCESS, Linux's get/setpriority act on the one thread named by
// its kernel thread id, not on the whole process.
id_t ThisThreadId() { return static_cast<id_t>(::syscall(SYS_gettid)); }

}  // namespace

int ThreadNice() {
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, ThisThreadId());
  return (nice == -1 && errno != 0) ? 0 : nice;
}

Status LowerThreadPriority(int nice) {
  if (nice < 0 || nice > 19) {
    return Status::InvalidArgument("worker nice " + std::to_string(nice) + " is outside 0..19");
  }
  if (nice == 0) return Status::OK();
  const int target = std::min(19, ThreadNice() + nice);
  if (::setpriority(PRIO_PROCESS, ThisThreadId(), target) != 0) {
    return Status::IOError(std::string("setpriority: ") + std::strerror(errno));
  }
  return Status::OK();
}

Status RunOnEachThread(boost::asio::thread_pool& pool, size_t threads, const std::function<Status()>& fn) {
  std::mutex mu;
  std::condition_variable cv;
  size_t started = 0, finished = 0;
  Status first_error;
  for (size_t i = 0; i < threads; ++i) {
    boost::asio::post(pool, [&] {
      Status s = fn();
      std::unique_lock<std::mutex> lock(mu);
      if (!s.ok() && first_error.ok()) first_error = std::move(s);
      ++started;
      cv.notify_all();
      cv.wait(lock, [&] { return started == threads; });
      ++finished;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return finished == threads; });
  return first_error;
}

Status LowerPoolPriority(boost::asio::thread_pool& pool, size_t threads, int nice) {
  if (nice < 0 || nice > 19) return LowerThreadPriority(nice);  // the same InvalidArgument
  if (nice == 0) return Status::OK();
  return RunOnEachThread(pool, threads, [nice] { return LowerThreadPriority(nice); });
}

}  // namespace trainsnap::internal
