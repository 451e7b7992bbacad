#include "workload_stats.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>

namespace trainsnap::bench {

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * values.size()));
  rank = std::clamp<size_t>(rank, 1, values.size());
  return values[rank - 1];
}

DiskUsageBytes DiskUsage(const std::string& dir) {
  DiskUsageBytes total;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return total;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st;
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total.allocated += static_cast<uint64_t>(st.st_blocks) * 512;
      total.apparent += static_cast<uint64_t>(st.st_size);
    }
  }
  return total;
}

double MemcpySeconds(uint64_t bytes, int reps) {
  if (bytes == 0) return 0;
  std::unique_ptr<char[]> src(new char[bytes]);
  std::unique_ptr<char[]> dst(new char[bytes]);
  std::memset(src.get(), 1, bytes);
  std::memset(dst.get(), 2, bytes);
  std::vector<double> times;
  for (int i = 0; i < std::max(reps, 1); ++i) {
    auto start = std::chrono::steady_clock::now();
    std::memcpy(dst.get(), src.get(), bytes);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    // Keep the copy observable so that it is not optimized away.
    if (dst[bytes / 2] != src[bytes / 2]) return -1;
  }
  return Median(times);
}

}  // namespace trainsnap::bench
