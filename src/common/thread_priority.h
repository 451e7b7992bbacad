// Scheduling priority of worker threads. Snapshot work (encode, commit,
// RocksDB flushes) runs beside training on the same cores; at a lower
// priority it takes the CPU the training loop leaves idle instead of
// preempting one of its compute threads (which stalls the others at their
// next barrier). Measured in bench/README.md ("Worker priority").
#pragma once

#include <cstddef>
#include <functional>

#include <boost/asio/thread_pool.hpp>

#include "trainsnap/status.h"

namespace trainsnap::internal {

// Adds `nice` (0..19) to the calling thread's nice value, capped at 19
// (Linux: per thread). 0 does nothing. Lowering a priority needs no
// privileges. InvalidArgument for a value outside 0..19, IOError when the
// system call fails.
Status LowerThreadPriority(int nice);

// The calling thread's nice value.
int ThreadNice();

// Runs fn once on each of the `threads` threads of `pool` and waits: one
// task per thread, each held until all have started, so no thread runs two.
// `threads` must be the pool's thread count (more would wait forever), and
// the pool must have no other work queued. Returns the first error.
Status RunOnEachThread(boost::asio::thread_pool& pool, size_t threads, const std::function<Status()>& fn);

// RunOnEachThread(pool, threads, LowerThreadPriority(nice)).
Status LowerPoolPriority(boost::asio::thread_pool& pool, size_t threads, int nice);

}  // namespace trainsnap::internal
