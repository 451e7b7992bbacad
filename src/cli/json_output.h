// The JSON forms of the library's reports, shared by the commands. The
// schema is documented in docs/cli.md; fields are only ever added.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "trainsnap/store.h"

namespace trainsnap::cli {

// Every --json document starts with {"schema": "trainsnap.<command>/1"}.
nlohmann::json JsonDocument(const std::string& command);
nlohmann::json SnapshotInfoJson(const SnapshotInfo& info);
nlohmann::json GcReportJson(const GcReport& report);
// A number, or null when undefined.
nlohmann::json OptionalJson(std::optional<double> value);
// Writes the document to stdout, pretty-printed, with a final newline.
void PrintJson(const nlohmann::json& document);

}  // namespace trainsnap::cli
