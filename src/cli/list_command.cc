// trainsnap list STORE: one row per snapshot, and totals. On a run directory
// of DistributedCheckpointer: one row per global step, with every rank's bytes.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/human_format.h"
#include "cli/json_output.h"
#include "cli/run_dir_commands.h"
#include "cli/store_access.h"
#include "cli/table.h"
#include "distributed/run_dir.h"

namespace trainsnap::cli {

namespace {

struct ListOptions {
  std::string store;
  bool json = false;
};

// The global steps, read from global/'s records (the per-rank figures each
// rank reported when the step committed); the rank stores are not opened.
Status RunListRunDirectory(const ListOptions& options) {
  const std::string global_path = internal::GlobalStorePath(options.store);
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> global, OpenForReading(global_path));
  auto steps = global->List();
  if (!steps.ok()) return steps.status().WithContext("list global steps");
  struct Row {
    SnapshotInfo info;
    internal::GlobalRecord record;
    internal::RankFigures total;
  };
  std::vector<Row> rows;
  for (const SnapshotInfo& info : *steps) {
    auto manifest = global->Manifest(info.step);
    if (!manifest.ok()) return manifest.status().WithContext("global step " + std::to_string(info.step));
    auto record = internal::ParseGlobalRecord(*manifest);
    if (!record.ok()) return record.status().WithContext("global step " + std::to_string(info.step));
    Row row{info, *record, {}};
    for (const internal::RankFigures& f : row.record.ranks) {
      row.total.logical_bytes += f.logical_bytes;
      row.total.stored_bytes += f.stored_bytes;
      row.total.new_bytes += f.new_bytes;
    }
    rows.push_back(std::move(row));
  }

  if (options.json) {
    nlohmann::json doc = JsonDocument("list-run");
    doc["run_dir"] = options.store;
    doc["global_steps"] = nlohmann::json::array();
    for (const Row& row : rows) {
      nlohmann::json ranks = nlohmann::json::array();
      for (size_t r = 0; r < row.record.ranks.size(); ++r) {
        const internal::RankFigures& f = row.record.ranks[r];
        ranks.push_back({{"rank", r},
                         {"logical_bytes", f.logical_bytes},
                         {"stored_bytes", f.stored_bytes},
                         {"new_bytes", f.new_bytes}});
      }
      doc["global_steps"].push_back({{"step", row.info.step},
                                     {"created_unix_ms", row.info.created_unix_ms},
                                     {"world_size", row.record.world_size},
                                     {"model_replicated", row.record.model_replicated},
                                     {"optimizer_replicated", row.record.optimizer_replicated},
                                     {"logical_bytes", row.total.logical_bytes},
                                     {"stored_bytes", row.total.stored_bytes},
                                     {"new_bytes", row.total.new_bytes},
                                     {"ranks", ranks}});
    }
    PrintJson(doc);
    return Status::OK();
  }

  if (rows.empty()) {
    std::cout << "run directory " << options.store << ": no global steps\n";
    return Status::OK();
  }
  Table table({{"STEP", Align::kRight},
               {"CREATED (UTC)"},
               {"RANKS", Align::kRight},
               {"LOGICAL", Align::kRight},
               {"STORED", Align::kRight},
               {"NEW", Align::kRight},
               {"STORED PER RANK"}});
  for (const Row& row : rows) {
    std::string per_rank;
    for (const internal::RankFigures& f : row.record.ranks) {
      per_rank += (per_rank.empty() ? "" : " / ") + HumanBytes(f.stored_bytes);
    }
    table.AddRow({std::to_string(row.info.step), HumanTime(row.info.created_unix_ms),
                  std::to_string(row.record.world_size), HumanBytes(row.total.logical_bytes),
                  HumanBytes(row.total.stored_bytes), HumanBytes(row.total.new_bytes), per_rank});
  }
  std::cout << table.Render();
  return Status::OK();
}

Status RunList(const ListOptions& options) {
  if (IsRunDirectory(options.store)) return RunListRunDirectory(options);
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
  app->add_option("store", options->store, "Path of the store, or of a run directory (docs/distributed.md)")
      ->required();
  app->add_flag("--json", options->json,
                "Print JSON (schema trainsnap.list/1, or trainsnap.list-run/1 for a run directory; docs/cli.md)");
  return {app, [options] { return RunList(*options); }};
}

}  // namespace trainsnap::cli
