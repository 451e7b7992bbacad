// Runs fn(0..n-1) on a thread pool and waits; the first error wins.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "trainsnap/status.h"

namespace trainsnap::internal {

// The calling thread only waits (it must not be one of `pool`'s threads).
// n <= 1 runs inline. Every task runs even after an error (they are short and
// the caller's buffers must outlive them all).
inline Status ParallelFor(boost::asio::thread_pool& pool, size_t n, const std::function<Status(size_t)>& fn) {
  if (n == 0) return Status::OK();
  if (n == 1) return fn(0);
  std::mutex mu;
  std::condition_variable cv;
  size_t remaining = n;
  Status first_error;
  for (size_t i = 0; i < n; ++i) {
    boost::asio::post(pool, [&, i] {
      Status s = fn(i);
      std::lock_guard<std::mutex> lock(mu);
      if (!s.ok() && first_error.ok()) first_error = std::move(s);
      if (--remaining == 0) cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return remaining == 0; });
  return first_error;
}

}  // namespace trainsnap::internal
