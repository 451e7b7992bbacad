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

// Allocated bytes of every regular file under `dir` (what `du -s` counts:
// st_blocks * 512). 0 when the directory does not exist.
uint64_t DiskUsage(const std::string& dir);

// Median seconds of one memcpy of `bytes` between two pre-faulted buffers,
// over `reps` repetitions.
double MemcpySeconds(uint64_t bytes, int reps);

}  // namespace trainsnap::bench
