#include "distributed/drop_timing.h"

#include <time.h>

#include "common/mutex.h"

namespace trainsnap::internal {
namespace {

double Now(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

Mutex totals_mu;
DropTotals totals GUARDED_BY(totals_mu);

}  // namespace

DropTotals RetentionDropTotals() {
  MutexLock lock(&totals_mu);
  return totals;
}

DropTimer::DropTimer() : wall_start_(Now(CLOCK_MONOTONIC)), cpu_start_(Now(CLOCK_THREAD_CPUTIME_ID)) {}

DropTimer::~DropTimer() {
  const double wall = Now(CLOCK_MONOTONIC) - wall_start_;
  const double cpu = Now(CLOCK_THREAD_CPUTIME_ID) - cpu_start_;
  MutexLock lock(&totals_mu);
  ++totals.drops;
  totals.wall_s += wall;
  totals.cpu_s += cpu;
}

}  // namespace trainsnap::internal
