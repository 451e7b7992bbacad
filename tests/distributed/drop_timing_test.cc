#include "distributed/drop_timing.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace trainsnap::testing {
namespace {

using internal::DropTimer;
using internal::DropTotals;
using internal::RetentionDropTotals;

// A drop that sleeps 30 ms and one that spins 20 ms of CPU: both counted,
// the wall time at least their sum, the CPU time the spin's and not the
// sleep's.
TEST(DropTimingTest, AddsEachDropsWallAndThreadCpuTime) {
  const DropTotals before = RetentionDropTotals();
  {
    DropTimer timer;
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  {
    DropTimer timer;
    const auto start = std::chrono::steady_clock::now();
    volatile uint64_t spin = 0;
    while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(20)) spin = spin + 1;
  }
  const DropTotals after = RetentionDropTotals();
  EXPECT_EQ(after.drops - before.drops, 2u);
  const double wall = after.wall_s - before.wall_s;
  const double cpu = after.cpu_s - before.cpu_s;
  EXPECT_GE(wall, 0.050);
  EXPECT_LT(wall, 5.0);
  EXPECT_LE(cpu, wall);
  // The sleep takes no CPU: at most the spin's 20 ms (and its scheduling).
  EXPECT_LT(cpu, wall - 0.025);
}

}  // namespace
}  // namespace trainsnap::testing
