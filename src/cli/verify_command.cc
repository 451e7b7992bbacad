// trainsnap verify STORE [STEP | --all]: re-hashes every chunk.
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/human_format.h"
#include "cli/json_output.h"
#include "cli/param_names.h"
#include "cli/progress_bar.h"
#include "cli/run_dir_commands.h"
#include "cli/store_access.h"
#include "cli/table.h"

namespace trainsnap::cli {

namespace {

struct VerifyOptions {
  std::string store;
  std::optional<int64_t> step;
  bool all = false;
  bool json = false;
  bool repair = false;            // delete leftover tensor records first
  bool acknowledge_loss = false;  // accept lost commits first
};

Status RunVerify(const VerifyOptions& options) {
  if (IsRunDirectory(options.store)) {
    // A usage error (exit 2), before any store is opened.
    if (options.repair || options.acknowledge_loss) {
      return Status::InvalidArgument("usage: --repair and --acknowledge-loss take one store, not the run directory " +
                                     options.store + " (name global/ or a rank-NNNNN/ inside it)");
    }
    return VerifyRunDirectory(options.store, options.step, options.json);
  }
  // --repair and --acknowledge-loss write: they need the store for writing.
  const bool write = options.repair || options.acknowledge_loss;
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store,
                             write ? OpenForWriting(options.store) : OpenForReading(options.store));
  std::optional<LostCommits> acknowledged;
  RepairReport repaired;
  if (options.acknowledge_loss) {
    acknowledged = store->lost_commits();
    TRAINSNAP_RETURN_IF_ERROR(store->AcknowledgeLostCommits());
  }
  if (options.repair) {
    auto result = store->Repair();
    if (!result.ok()) return result.status();
    repaired = std::move(*result);
  }
  if (!options.json) {
    if (acknowledged) {
      std::cout << "acknowledged lost commits: the commit log recorded " << acknowledged->recorded
                << " write transactions, the database holds " << acknowledged->found << "\n";
    }
    if (options.repair) {
      std::cout << "repaired: deleted " << repaired.tensor_records << " leftover tensor records"
                << (repaired.steps.empty() ? "" : " of steps " + StepList(repaired.steps)) << "\n";
    }
  }
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
      auto view = ManifestView::Read(*store, p.step);
      it = manifests.emplace(p.step, view.ok() ? std::move(*view) : ManifestView::Parse(std::string())).first;
    }
    return it->second.Name(p.param_id);
  };
  std::set<int64_t> bad_steps;
  size_t store_problems = 0;
  // A file that cannot be read (permission denied, a failing disk) says
  // nothing about the bytes in it: an I/O error, not corruption.
  size_t io_errors = 0;
  for (const VerifyProblem& p : report.problems) {
    if (p.status.code() == StatusCode::kIOError) ++io_errors;
    if (p.store) {
      ++store_problems;
    } else {
      bad_steps.insert(p.step);
    }
  }
  const size_t damage = report.problems.size() - io_errors;

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
    doc["corruption_problems"] = damage;
    doc["io_error_problems"] = io_errors;
    doc["deleted_meanwhile"] = report.deleted_meanwhile;
    if (options.acknowledge_loss) {
      doc["acknowledged_lost_commits"] =
          acknowledged ? nlohmann::json({{"recorded", acknowledged->recorded}, {"found", acknowledged->found}})
                       : nlohmann::json(nullptr);
    }
    if (options.repair) {
      doc["repaired"] = {{"steps", repaired.steps}, {"tensor_records", repaired.tensor_records}};
    }
    doc["problems"] = nlohmann::json::array();
    for (const VerifyProblem& p : report.problems) {
      if (p.store) {
        // A problem of the store as a whole: no step, tensor or chunk.
        doc["problems"].push_back({{"store", true},
                                   {"file", p.file.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.file)},
                                   {"step", nullptr},
                                   {"code", std::string(StatusCodeName(p.status.code()))},
                                   {"message", p.status.message()}});
        continue;
      }
      doc["problems"].push_back({{"store", false},
                                 {"step", p.step},
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
    } else if (damage == 0) {
      std::cout << report.problems.size() << " I/O errors (files that could not be read; no corruption found)\n";
    } else {
      if (store_problems == 0) {
        std::cout << report.problems.size() << " problems in " << bad_steps.size() << " snapshots\n";
      } else {
        std::cout << report.problems.size() << " problems: " << store_problems << " in the store's files, "
                  << report.problems.size() - store_problems << " in " << bad_steps.size() << " snapshots\n";
      }
      for (const VerifyProblem& p : report.problems) {
        if (p.store) std::cout << "store" << (p.file.empty() ? "" : " file " + p.file) << ": " << p.status.ToString() << "\n";
      }
      Table table({{"STEP", Align::kRight}, {"PARAMETER"}, {"ROLE"}, {"CHUNK", Align::kRight}, {"HASH"},
                   {"PROBLEM"}});
      for (const VerifyProblem& p : report.problems) {
        if (p.store) continue;
        table.AddRow({std::to_string(p.step), p.role.empty() ? "(manifest)" : name_of(p), p.role,
                      p.chunk_index >= 0 ? std::to_string(p.chunk_index) : "-",
                      p.chunk_index >= 0 ? p.hash.Hex() : "-", p.status.ToString()});
      }
      if (report.problems.size() > store_problems) std::cout << table.Render();
    }
    if (!report.deleted_meanwhile.empty()) {
      std::cout << "deleted by the writer while verify ran (not checked): " << StepList(report.deleted_meanwhile)
                << "\n";
    }
    std::cout.flush();
  }
  if (report.ok()) return Status::OK();
  std::string where;
  if (store_problems > 0) where = std::to_string(store_problems) + " in the store's files";
  if (!bad_steps.empty()) {
    where += (where.empty() ? "" : ", ") + std::string("in snapshots ") +
             StepList(std::vector<int64_t>(bad_steps.begin(), bad_steps.end()));
  }
  if (damage == 0) {
    return Status::IOError("could not read the store: " + std::to_string(io_errors) + " I/O errors (" + where +
                           "), first: " + report.problems.front().status.message() +
                           "; no corruption found in what was read: check the permissions and the disk");
  }
  return Status::Corruption("corruption found: " + std::to_string(damage) + " problems (" + where + ")" +
                            (io_errors > 0 ? " and " + std::to_string(io_errors) + " I/O errors" : ""));
}

}  // namespace

Command AddVerifyCommand(CLI::App& parent) {
  auto options = std::make_shared<VerifyOptions>();
  CLI::App* app = parent.add_subcommand("verify", "Re-hash every chunk; exit 3 on corruption");
  app->footer("Re-reads and re-hashes every chunk of STEP, or of every snapshot (--all, the "
              "default); lists each bad step / parameter / role / chunk. Exit code 3 when "
              "corruption is found, 6 when files could not be read (I/O errors) and nothing "
              "read was corrupt.");
  app->add_option("store", options->store, "Path of the store, or of a run directory (docs/distributed.md)")
      ->required();
  CLI::Option* step = app->add_option("step", options->step, "Snapshot step (default: all)")->check(StepValidator());
  app->add_flag("--all", options->all, "Verify every snapshot")->excludes(step);
  app->add_flag("--json", options->json, "Print JSON (schema trainsnap.verify/1, docs/cli.md)");
  app->add_flag("--repair", options->repair,
                "First delete leftover tensor records of deleted steps (opens the store for writing)");
  app->add_flag("--acknowledge-loss", options->acknowledge_loss,
                "First accept reported lost commits, so that gc and prune run again (opens the store for writing)");
  return {app, [options] { return RunVerify(*options); }};
}

}  // namespace trainsnap::cli
