#include "cli/json_output.h"

#include <cmath>
#include <iostream>

#include "cli/human_format.h"

namespace trainsnap::cli {

nlohmann::json JsonDocument(const std::string& command) {
  return nlohmann::json{{"schema", "trainsnap." + command + "/1"}};
}

nlohmann::json SnapshotInfoJson(const SnapshotInfo& info) {
  return {
      {"step", info.step},
      {"created_unix_ms", info.created_unix_ms},
      {"created", IsoTime(info.created_unix_ms)},
      {"tensors", info.tensors},
      {"logical_bytes", info.logical_bytes},
      {"chunks", info.chunks},
      {"stored_bytes", info.stored_bytes},
      {"new_chunks", info.new_chunks},
      {"new_bytes", info.new_bytes},
      {"manifest_bytes", info.manifest_bytes},
      {"compression_ratio", OptionalJson(Ratio(info.logical_bytes, info.stored_bytes))},
      {"dedup_ratio", OptionalJson(Ratio(info.stored_bytes, info.new_bytes))},
  };
}

nlohmann::json GcReportJson(const GcReport& report) {
  return {
      {"chunks_scanned", report.chunks_scanned}, {"chunks_deleted", report.chunks_deleted},
      {"bytes_deleted", report.bytes_deleted},   {"chunks_live", report.chunks_live},
      {"damaged_packs", report.damaged_packs},   {"damaged_steps", report.damaged_steps},
  };
}

nlohmann::json OptionalJson(std::optional<double> value) {
  if (!value.has_value() || !std::isfinite(*value)) return nullptr;
  return *value;
}

void PrintJson(const nlohmann::json& document) {
  // error_handler_t::replace: a non-UTF-8 parameter name must not abort output.
  std::cout << document.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  std::cout.flush();
}

}  // namespace trainsnap::cli
