// Small measurement helpers for the benchmarks: order statistics, disk usage
// of a directory, and the yardsticks every figure is a ratio against: memcpy
// (capture stall), a synced write of the same bytes (persist), and a dropped
// page cache (cold restores).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainsnap/status.h"

namespace trainsnap::bench {

// Median (mean of the two middle values for even sizes); 0 for an empty input.
double Median(std::vector<double> values);

// Nearest-rank percentile, p in [0, 100]; 0 for an empty input.
double Percentile(std::vector<double> values, double p);

struct DiskUsageBytes {
  uint64_t allocated = 0;  // st_blocks * 512, what `du -s` counts (includes preallocation)
  uint64_t apparent = 0;   // st_size, what `du -s --apparent-size` counts
};

// Sizes of every regular file under `dir`; zeros when it does not exist.
DiskUsageBytes DiskUsage(const std::string& dir);

// Median seconds of one memcpy of `bytes` between two pre-faulted buffers,
// over `reps` repetitions.
double MemcpySeconds(uint64_t bytes, int reps);

// Seconds to write `bytes` of non-repeating data to a new file at `path` in
// 4 MiB write(2) calls, fdatasync it and close it: what the disk gives a
// writer that syncs, the peer of a snapshot's persist. The file is removed.
Result<double> SyncedWriteSeconds(uint64_t bytes, const std::string& path);

// sync(2), then `echo 3 > /proc/sys/vm/drop_caches`, so that the next read of
// any file comes from the disk (the resume after a reboot or on another
// machine). Needs root: IOError otherwise.
Status DropPageCache();

}  // namespace trainsnap::bench
