// trainsnap stats STORE: whole-store figures.
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/human_format.h"
#include "cli/json_output.h"
#include "cli/progress_bar.h"
#include "cli/store_access.h"
#include "cli/table.h"

namespace trainsnap::cli {

namespace {

struct StatsOptions {
  std::string store;
  bool json = false;
};

Status RunStats(const StatsOptions& options) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenForReading(options.store));
  StoreStats s;
  {
    ProgressBar progress("stats", /*bytes=*/false);
    auto result = store->Stats(progress.Callback());
    if (!result.ok()) return result.status().WithContext("stats");
    s = *result;
  }
  // dedup: how many times each stored byte is referenced by the snapshots;
  // compression: raw / encoded bytes of the distinct chunks.
  auto dedup = Ratio(s.referenced_bytes, s.chunk_stored_bytes);
  auto compression = Ratio(s.chunk_raw_bytes, s.chunk_stored_bytes);
  auto effective = Ratio(s.logical_bytes, s.chunk_stored_bytes);
  if (options.json) {
    nlohmann::json doc = JsonDocument("stats");
    doc["store"] = options.store;
    doc["chunk_bytes"] = store->chunk_bytes();
    doc["snapshots"] = s.snapshots;
    doc["chunks"] = s.chunks;
    doc["chunk_stored_bytes"] = s.chunk_stored_bytes;
    doc["chunk_raw_bytes"] = s.chunk_raw_bytes;
    doc["logical_bytes"] = s.logical_bytes;
    doc["referenced_bytes"] = s.referenced_bytes;
    doc["collectable_chunks"] = s.collectable_chunks;
    doc["collectable_bytes"] = s.collectable_bytes;
    doc["sst_bytes"] = s.sst_bytes;
    doc["pack_bytes"] = s.pack_bytes;
    doc["packs"] = s.packs;
    doc["pack_garbage_bytes"] = s.pack_garbage_bytes;
    doc["wal_bytes"] = s.wal_bytes;
    doc["reserve_bytes"] = s.reserve_bytes;
    doc["other_bytes"] = s.other_bytes;
    doc["disk_bytes"] = s.disk_bytes;
    doc["dedup_ratio"] = OptionalJson(dedup);
    doc["compression_ratio"] = OptionalJson(compression);
    doc["effective_ratio"] = OptionalJson(effective);
    PrintJson(doc);
    return Status::OK();
  }
  Table table({{"STORE " + options.store}, {"VALUE", Align::kRight}, {"BYTES", Align::kRight}});
  auto bytes_row = [&](const std::string& what, uint64_t bytes) {
    table.AddRow({what, HumanBytes(bytes), std::to_string(bytes)});
  };
  table.AddRow({"snapshots", std::to_string(s.snapshots), ""});
  table.AddRow({"chunk size", HumanBytes(store->chunk_bytes()), std::to_string(store->chunk_bytes())});
  table.AddRow({"distinct chunks", std::to_string(s.chunks), ""});
  bytes_row("chunks, raw", s.chunk_raw_bytes);
  bytes_row("chunks, stored", s.chunk_stored_bytes);
  bytes_row("snapshots, logical", s.logical_bytes);
  bytes_row("snapshots, referenced", s.referenced_bytes);
  table.AddRow({"dedup ratio (referenced / stored)", HumanRatio(dedup), ""});
  table.AddRow({"compression ratio (raw / stored)", HumanRatio(compression), ""});
  table.AddRow({"effective ratio (logical / stored)", HumanRatio(effective), ""});
  table.AddRow({"collectable chunks", std::to_string(s.collectable_chunks), ""});
  bytes_row("collectable", s.collectable_bytes);
  bytes_row("RocksDB table files (SST)", s.sst_bytes);
  bytes_row("pack files (" + std::to_string(s.packs) + ")", s.pack_bytes);
  bytes_row("  of which unreferenced (gc compacts)", s.pack_garbage_bytes);
  bytes_row("RocksDB WAL (unflushed commits)", s.wal_bytes);
  bytes_row("free-space reserve", s.reserve_bytes);
  bytes_row("other (MANIFEST, OPTIONS, ...)", s.other_bytes);
  bytes_row("on disk (every file)", s.disk_bytes);
  std::cout << table.Render();
  return Status::OK();
}

}  // namespace

Command AddStatsCommand(CLI::App& parent) {
  auto options = std::make_shared<StatsOptions>();
  CLI::App* app = parent.add_subcommand("stats", "Store sizes, chunk counts, ratios, collectable bytes");
  app->footer("RocksDB table/blob/WAL sizes, chunk counts, dedup and compression ratios, "
              "collectable bytes.");
  app->add_option("store", options->store, "Path of the store")->required();
  app->add_flag("--json", options->json, "Print JSON (schema trainsnap.stats/1, docs/cli.md)");
  return {app, [options] { return RunStats(*options); }};
}

}  // namespace trainsnap::cli
