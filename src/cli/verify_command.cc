// trainsnap verify STORE [STEP | --all]: re-hashes every chunk.
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/human_format.h"
#include "cli/json_output.h"
#include "cli/param_names.h"
#include "cli/progress_bar.h"
#include "cli/store_access.h"
#include "cli/table.h"

namespace trainsnap::cli {

namespace {

struct VerifyOptions {
  std::string store;
  std::optional<int64_t> step;
  bool all = false;
  bool json = false;
};

Status RunVerify(const VerifyOptions& options) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenForReading(options.store));
  if (options.step.has_value()) TRAINSNAP_RETURN_IF_ERROR(RequireStep(*store, *options.step).status());
  VerifyReport report;
  {
    ProgressBar progress("verify", /*bytes=*/false);
    auto result = store->Verify(options.step, progress.Callback());
    if (!result.ok()) return result.status().WithContext("verify");
    report = std::move(*result);
  }

  // Names come from each bad step's manifest, when it still parses.
  std::map<int64_t, ManifestView> manifests;
  auto name_of = [&](const VerifyProblem& p) {
    auto it = manifests.find(p.step);
    if (it == manifests.end()) {
      auto bytes = store->Manifest(p.step);
      it = manifests.emplace(p.step, ManifestView::Parse(bytes.ok() ? *bytes : std::string())).first;
    }
    return it->second.Name(p.param_id);
  };
  std::set<int64_t> bad_steps;
  for (const VerifyProblem& p : report.problems) bad_steps.insert(p.step);

  if (options.json) {
    nlohmann::json doc = JsonDocument("verify");
    doc["store"] = options.store;
    doc["step"] = options.step ? nlohmann::json(*options.step) : nullptr;
    doc["ok"] = report.ok();
    doc["snapshots"] = report.snapshots;
    doc["tensors"] = report.tensors;
    doc["chunks"] = report.chunks;
    doc["bytes"] = report.bytes;
    doc["bad_steps"] = bad_steps;
    doc["problems"] = nlohmann::json::array();
    for (const VerifyProblem& p : report.problems) {
      doc["problems"].push_back({{"step", p.step},
                                 {"param_id", HexId(p.param_id)},
                                 {"name", p.role.empty() ? nlohmann::json(nullptr) : nlohmann::json(name_of(p))},
                                 {"role", p.role},
                                 {"chunk_index", p.chunk_index},
                                 {"chunk_hash", p.chunk_index >= 0 ? nlohmann::json(p.hash.Hex()) : nullptr},
                                 {"code", std::string(StatusCodeName(p.status.code()))},
                                 {"message", p.status.message()}});
    }
    PrintJson(doc);
  } else {
    std::cout << "verified " << report.snapshots << " snapshots, " << report.tensors << " tensors, " << report.chunks
              << " chunk references, " << HumanBytes(report.bytes) << " re-hashed: ";
    if (report.ok()) {
      std::cout << "OK\n";
    } else {
      std::cout << report.problems.size() << " problems in " << bad_steps.size() << " snapshots\n";
      Table table({{"STEP", Align::kRight}, {"PARAMETER"}, {"ROLE"}, {"CHUNK", Align::kRight}, {"HASH"},
                   {"PROBLEM"}});
      for (const VerifyProblem& p : report.problems) {
        table.AddRow({std::to_string(p.step), p.role.empty() ? "(manifest)" : name_of(p), p.role,
                      p.chunk_index >= 0 ? std::to_string(p.chunk_index) : "-",
                      p.chunk_index >= 0 ? p.hash.Hex() : "-", p.status.ToString()});
      }
      std::cout << table.Render();
    }
    std::cout.flush();
  }
  if (report.ok()) return Status::OK();
  std::string steps;
  for (int64_t s : bad_steps) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
  return Status::Corruption("corruption found: " + std::to_string(report.problems.size()) +
                            " problems in snapshots " + steps);
}

}  // namespace

Command AddVerifyCommand(CLI::App& parent) {
  auto options = std::make_shared<VerifyOptions>();
  CLI::App* app = parent.add_subcommand("verify", "Re-hash every chunk; exit 3 on corruption");
  app->footer("Re-reads and re-hashes every chunk of STEP, or of every snapshot (--all, the "
              "default); lists each bad step / parameter / role / chunk. Exit code 3 when "
              "corruption is found.");
  app->add_option("store", options->store, "Path of the store")->required();
  CLI::Option* step = app->add_option("step", options->step, "Snapshot step (default: all)")->check(StepValidator());
  app->add_flag("--all", options->all, "Verify every snapshot")->excludes(step);
  app->add_flag("--json", options->json, "Print JSON (schema trainsnap.verify/1, docs/cli.md)");
  return {app, [options] { return RunVerify(*options); }};
}

}  // namespace trainsnap::cli
