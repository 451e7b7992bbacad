// What this process's DistributedCheckpointer retention drops have cost:
// each drop's wall time and the CPU time of the thread that ran it (the
// deletes, the pack compaction; RocksDB's background flushes and
// compactions run on its own threads and are not counted). For
// distributed_bench, which reports a drop apart from the capture it ends:
// a capture's latency varies by more than a drop costs.
#pragma once

#include <cstdint>

namespace trainsnap::internal {

struct DropTotals {
  uint64_t drops = 0;  // DropRetained calls that dropped at least one step
  double wall_s = 0;
  double cpu_s = 0;
};

// Totals since the process started, over every checkpointer in it.
DropTotals RetentionDropTotals();

// Times one drop from construction to destruction and adds it to the totals.
class DropTimer {
 public:
  DropTimer();
  ~DropTimer();
  DropTimer(const DropTimer&) = delete;
  DropTimer& operator=(const DropTimer&) = delete;

 private:
  double wall_start_;
  double cpu_start_;
};

}  // namespace trainsnap::internal
