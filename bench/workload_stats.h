// Small measurement helpers for trainsnap_bench: order statistics, disk
// usage of a directory, and the memcpy yardstick for the capture stall.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

}  // namespace trainsnap::bench
