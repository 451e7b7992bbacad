// trainsnap list STORE: one row per snapshot, and totals.
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/human_format.h"
#include "cli/json_output.h"
#include "cli/store_access.h"
#include "cli/table.h"

namespace trainsnap::cli {

namespace {

struct ListOptions {
  std::string store;
  bool json = false;
};

Status RunList(const ListOptions& options) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenForReading(options.store));
  auto snapshots = store->List();
  if (!snapshots.ok()) return snapshots.status().WithContext("list snapshots");

  SnapshotInfo totals;
  for (const SnapshotInfo& info : *snapshots) {
    totals.tensors += info.tensors;
    totals.logical_bytes += info.logical_bytes;
    totals.chunks += info.chunks;
    totals.stored_bytes += info.stored_bytes;
    totals.new_chunks += info.new_chunks;
    totals.new_bytes += info.new_bytes;
    totals.manifest_bytes += info.manifest_bytes;
  }

  if (options.json) {
    nlohmann::json doc = JsonDocument("list");
    doc["store"] = options.store;
    doc["snapshots"] = nlohmann::json::array();
    for (const SnapshotInfo& info : *snapshots) doc["snapshots"].push_back(SnapshotInfoJson(info));
    doc["totals"] = {
        {"snapshots", snapshots->size()},
        {"tensors", totals.tensors},
        {"logical_bytes", totals.logical_bytes},
        {"chunks", totals.chunks},
        {"stored_bytes", totals.stored_bytes},
        {"new_chunks", totals.new_chunks},
        {"new_bytes", totals.new_bytes},
        {"manifest_bytes", totals.manifest_bytes},
        {"compression_ratio", OptionalJson(Ratio(totals.logical_bytes, totals.stored_bytes))},
        {"dedup_ratio", OptionalJson(Ratio(totals.stored_bytes, totals.new_bytes))},
    };
    PrintJson(doc);
    return Status::OK();
  }

  if (snapshots->empty()) {
    std::cout << "store " << options.store << ": no snapshots\n";
    return Status::OK();
  }
  Table table({{"STEP", Align::kRight},
               {"CREATED (UTC)"},
               {"TENSORS", Align::kRight},
               {"LOGICAL", Align::kRight},
               {"STORED", Align::kRight},
               {"NEW", Align::kRight},
               {"DEDUP", Align::kRight},
               {"COMPRESSION", Align::kRight}});
  auto row = [](const std::string& step, const std::string& created, const SnapshotInfo& info) {
    return std::vector<std::string>{step,
                                    created,
                                    std::to_string(info.tensors),
                                    HumanBytes(info.logical_bytes),
                                    HumanBytes(info.stored_bytes),
                                    HumanBytes(info.new_bytes),
                                    HumanRatio(Ratio(info.stored_bytes, info.new_bytes)),
                                    HumanRatio(Ratio(info.logical_bytes, info.stored_bytes))};
  };
  for (const SnapshotInfo& info : *snapshots) {
    table.AddRow(row(std::to_string(info.step), HumanTime(info.created_unix_ms), info));
  }
  table.AddSeparator();
  table.AddRow(row("total", std::to_string(snapshots->size()) + " snapshots", totals));
  std::cout << table.Render();
  return Status::OK();
}

}  // namespace

Command AddListCommand(CLI::App& parent) {
  auto options = std::make_shared<ListOptions>();
  CLI::App* app = parent.add_subcommand("list", "List snapshots with sizes and ratios");
  app->footer("One row per snapshot: step, time, tensors, logical/stored/new bytes, dedup and "
              "compression ratios; then totals. DEDUP = stored / new bytes, COMPRESSION = "
              "logical / stored bytes.");
  app->add_option("store", options->store, "Path of the store")->required();
  app->add_flag("--json", options->json, "Print JSON (schema trainsnap.list/1, docs/cli.md)");
  return {app, [options] { return RunList(*options); }};
}

}  // namespace trainsnap::cli
