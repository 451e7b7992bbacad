// Human-readable numbers for the tool's tables: sizes in IEC units, ratios,
// times and durations.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainsnap {
struct SnapshotInfo;
}  // namespace trainsnap

namespace trainsnap::cli {

// "0 B", "999 B", "1.0 KiB", "12.3 MiB", "1.50 GiB" (1024-based units).
std::string HumanBytes(uint64_t bytes);
// "3.25x"; "-" when the ratio is undefined (nullopt).
std::string HumanRatio(std::optional<double> ratio);
// numerator / denominator, nullopt when the denominator is 0.
std::optional<double> Ratio(uint64_t numerator, uint64_t denominator);
// "2026-11-29 18:01:33" (UTC).
std::string HumanTime(int64_t unix_ms);
// "2026-11-29T18:01:33.123Z" (UTC, ISO 8601), for JSON output.
std::string IsoTime(int64_t unix_ms);
// "0:07", "12:34", "1:02:03".
std::string HumanDuration(double seconds);
// "0x0123456789abcdef": a parameter ID when no name is known.
std::string HexId(uint64_t id);
// "3, 5, 8": steps as a comma-separated list.
std::string StepList(const std::vector<int64_t>& steps);
// The steps of `infos`, in their order.
std::vector<int64_t> StepsOf(const std::vector<SnapshotInfo>& infos);
// "[4, 16]"; "[]" for a scalar.
std::string ShapeString(const std::vector<int64_t>& shape);
// A double with up to `precision` significant digits ("1.5e-07", "0").
std::string HumanDouble(double value, int precision = 4);

}  // namespace trainsnap::cli
