#include "workload_stats.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
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

Result<double> SyncedWriteSeconds(uint64_t bytes, const std::string& path) {
  constexpr size_t kBlock = size_t{4} << 20;
  // Random words, so that no layer below can shortcut the write (zero pages,
  // compression, deduplication).
  std::vector<uint64_t> block(kBlock / sizeof(uint64_t));
  std::mt19937_64 random(bytes);
  for (auto& word : block) word = random();
  auto error = [&](const char* what) { return Status::IOError(std::string(what) + " " + path + ": " + std::strerror(errno)); };
  const auto start = std::chrono::steady_clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return error("open");
  for (uint64_t done = 0; done < bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, bytes - done));
    const ssize_t w = ::write(fd, block.data(), n);
    if (w <= 0) {
      Status s = error("write");
      ::close(fd);
      return s;
    }
    done += static_cast<uint64_t>(w);
    block[done % block.size()] ^= done;  // the next block differs from this one
  }
  if (::fdatasync(fd) != 0) {
    Status s = error("fdatasync");
    ::close(fd);
    return s;
  }
  if (::close(fd) != 0) return error("close");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::unlink(path.c_str());
  return seconds;
}

Status DropPageCache() {
  ::sync();
  std::ofstream drop("/proc/sys/vm/drop_caches");
  drop << "3\n";
  drop.flush();
  if (!drop) {
    return Status::IOError("cannot drop the page cache (write 3 to /proc/sys/vm/drop_caches): cold measurements need root");
  }
  return Status::OK();
}

}  // namespace trainsnap::bench
