#include "cli/human_format.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "trainsnap/store.h"

namespace trainsnap::cli {

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < sizeof(kUnits) / sizeof(kUnits[0])) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  // Two decimals below 10 keep three significant digits, as `ls -h` roughly does.
  std::snprintf(buf, sizeof(buf), value < 10.0 ? "%.2f %s" : "%.1f %s", value, kUnits[unit]);
  return buf;
}

std::optional<double> Ratio(uint64_t numerator, uint64_t denominator) {
  if (denominator == 0) return std::nullopt;
  return static_cast<double>(numerator) / static_cast<double>(denominator);
}

std::string HumanRatio(std::optional<double> ratio) {
  if (!ratio.has_value()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2fx", *ratio);
  return buf;
}

namespace {
std::tm UtcTime(int64_t unix_ms) {
  std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  if (unix_ms < 0 && unix_ms % 1000 != 0) --seconds;
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  return tm;
}
}  // namespace

std::string HumanTime(int64_t unix_ms) {
  std::tm tm = UtcTime(unix_ms);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string IsoTime(int64_t unix_ms) {
  std::tm tm = UtcTime(unix_ms);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  int64_t millis = ((unix_ms % 1000) + 1000) % 1000;
  char out[48];
  std::snprintf(out, sizeof(out), "%s.%03" PRId64 "Z", buf, millis);
  return out;
}

std::string HumanDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto total = static_cast<uint64_t>(seconds + 0.5);
  uint64_t h = total / 3600, m = (total / 60) % 60, s = total % 60;
  char buf[32];
  if (h > 0) {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 ":%02" PRIu64 ":%02" PRIu64, h, m, s);
  } else {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 ":%02" PRIu64, m, s);
  }
  return buf;
}

std::string HexId(uint64_t id) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%016" PRIx64, id);
  return buf;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string HumanDouble(double value, int precision) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
  return buf;
}

std::string StepList(const std::vector<int64_t>& steps) {
  std::string out;
  for (int64_t s : steps) out += (out.empty() ? "" : ", ") + std::to_string(s);
  return out;
}

std::vector<int64_t> StepsOf(const std::vector<SnapshotInfo>& infos) {
  std::vector<int64_t> steps;
  steps.reserve(infos.size());
  for (const SnapshotInfo& info : infos) steps.push_back(info.step);
  return steps;
}

}  // namespace trainsnap::cli
