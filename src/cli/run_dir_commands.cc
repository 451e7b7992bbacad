#include "cli/run_dir_commands.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <system_error>
#include <utility>

#include "cli/confirm.h"
#include "cli/human_format.h"
#include "cli/json_output.h"
#include "cli/param_names.h"
#include "cli/progress_bar.h"
#include "cli/retention_plan.h"
#include "cli/standard_output.h"
#include "cli/store_access.h"
#include "cli/table.h"
#include "distributed/run_dir.h"
#include "distributed/run_dir_deletion.h"
#include "manifest.pb.h"
#include "store/kill_point.h"
#include "store/retention.h"

namespace trainsnap::cli {

namespace {

// The stores of a run: global/ and rank-00000/ .. rank-<K-1>/ (the ranks are
// the consecutive rank directories from 0; a run resumed on fewer ranks keeps
// the stores of the ranks it lost, so K is the largest world size the run
// had).
struct Run {
  std::unique_ptr<Store> global;
  std::vector<std::unique_ptr<Store>> ranks;
  std::vector<SnapshotInfo> global_steps;
  std::vector<internal::GlobalRecord> records;  // by global_steps index
  // By rank store: the global steps it must hold (world size above its rank).
  std::vector<std::set<int64_t>> held;
};

// The global steps rank store `rank` belongs to, from each step's world size.
std::set<int64_t> GlobalStepsOfRank(const std::map<int64_t, int>& worlds, size_t rank) {
  std::set<int64_t> steps;
  for (const auto& [step, world] : worlds) {
    if (rank < static_cast<size_t>(world)) steps.insert(step);
  }
  return steps;
}

std::string RankName(size_t rank) { return internal::RankStoreName(static_cast<int>(rank)); }

// Opens every store first (Busy names the one a training run holds), so
// that a refusal changes nothing. `check`: every global record parses and
// names the run's world size (Corruption otherwise: a mutating command does
// not touch a damaged run; verify reports it instead).
Result<Run> OpenRun(const std::string& run_dir, bool write, bool check) {
  Run run;
  auto open = [&](const std::string& path) { return write ? OpenForWriting(path) : OpenForReading(path); };
  TRAINSNAP_ASSIGN_OR_RETURN(run.global, open(internal::GlobalStorePath(run_dir)));
  const int rank_stores = internal::CountRankStores(run_dir);
  for (int r = 0; r < rank_stores; ++r) {
    TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, open(internal::RankStorePath(run_dir, r)));
    run.ranks.push_back(std::move(store));
  }
  auto listed = run.global->List();
  if (!listed.ok()) return listed.status().WithContext("list global steps");
  run.global_steps = std::move(*listed);
  if (!check) return run;
  for (const SnapshotInfo& info : run.global_steps) {
    const std::string what = "global step " + std::to_string(info.step);
    auto manifest = run.global->Manifest(info.step);
    if (!manifest.ok()) return manifest.status().WithContext(what);
    auto record = internal::ParseGlobalRecord(*manifest);
    if (!record.ok()) return record.status().WithContext(what + " (run `trainsnap verify` on the run directory)");
    if (static_cast<size_t>(record->world_size) > run.ranks.size()) {
      return Status::Corruption(what + " was committed by " + std::to_string(record->world_size) +
                                " ranks, the run directory has " + std::to_string(run.ranks.size()) +
                                " rank stores (run `trainsnap verify` on the run directory)");
    }
    run.records.push_back(std::move(*record));
  }
  std::map<int64_t, int> worlds;
  for (size_t i = 0; i < run.global_steps.size(); ++i) worlds[run.global_steps[i].step] = run.records[i].world_size;
  for (size_t r = 0; r < run.ranks.size(); ++r) run.held.push_back(GlobalStepsOfRank(worlds, r));
  return run;
}

GcReport Add(GcReport a, const GcReport& b) {
  a.chunks_scanned += b.chunks_scanned;
  a.chunks_live += b.chunks_live;
  a.chunks_deleted += b.chunks_deleted;
  a.bytes_deleted += b.bytes_deleted;
  return a;
}

// Collects every store's garbage (global first, then the ranks).
Result<GcReport> CollectRun(Run& run) {
  ProgressBar progress("gc", /*bytes=*/false);
  GcReport total;
  std::vector<Store*> stores{run.global.get()};
  for (auto& rank : run.ranks) stores.push_back(rank.get());
  for (Store* store : stores) {
    auto gc = store->CollectGarbage(progress.Callback());
    if (!gc.ok()) return gc.status().WithContext("garbage collection of " + store->path());
    total = Add(total, *gc);
  }
  return total;
}

}  // namespace

bool IsRunDirectory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(internal::GlobalStorePath(path), ec) &&
         std::filesystem::is_directory(internal::RankStorePath(path, 0), ec);
}

Status VerifyRunDirectory(const std::string& run_dir, std::optional<int64_t> step, bool json) {
  TRAINSNAP_ASSIGN_OR_RETURN(Run run, OpenRun(run_dir, /*write=*/false, /*check=*/false));
  if (step.has_value()) TRAINSNAP_RETURN_IF_ERROR(RequireStep(*run.global, *step).status());
  struct Problem {
    std::string store;
    std::optional<int64_t> step;
    Status status;
  };
  std::vector<Problem> problems;
  std::vector<int64_t> steps;  // the global steps verified
  for (const SnapshotInfo& info : run.global_steps) {
    if (!step.has_value() || info.step == *step) steps.push_back(info.step);
  }
  struct Figures {
    VerifyReport report;
    std::vector<int64_t> local_only;
  };
  std::vector<Figures> figures(run.ranks.size() + 1);  // [0]: global, [r + 1]: rank r
  auto verify = [&](Store& store, const std::string& name, Figures& out) {
    ProgressBar progress("verify " + name, /*bytes=*/false);
    auto report = store.Verify(step, progress.Callback());
    if (!report.ok()) {
      problems.push_back({name, std::nullopt, report.status().WithContext("verify")});
      return;
    }
    for (const VerifyProblem& p : report->problems) {
      std::string where = p.store ? (p.file.empty() ? "" : "file " + p.file) : "";
      if (!p.store && !p.role.empty()) where = "tensor " + HexId(p.param_id) + " role " + p.role;
      if (!p.store && p.chunk_index >= 0) where += " chunk " + std::to_string(p.chunk_index);
      problems.push_back({name, p.store ? std::nullopt : std::optional<int64_t>(p.step),
                          where.empty() ? p.status : p.status.WithContext(where)});
    }
    out.report = std::move(*report);
  };
  verify(*run.global, "global", figures[0]);
  // Each global step's world size: the rank stores that must hold it. A
  // record that does not parse counts as naming every rank store.
  std::map<int64_t, int> worlds;
  for (const SnapshotInfo& info : run.global_steps) {
    const int64_t s = info.step;
    worlds[s] = static_cast<int>(run.ranks.size());
    auto manifest = run.global->Manifest(s);
    Result<internal::GlobalRecord> record =
        manifest.ok() ? internal::ParseGlobalRecord(*manifest) : Result<internal::GlobalRecord>(manifest.status());
    const bool verified = std::find(steps.begin(), steps.end(), s) != steps.end();
    if (!record.ok()) {
      if (verified) problems.push_back({"global", s, record.status().WithContext("global record")});
    } else if (static_cast<size_t>(record->world_size) > run.ranks.size()) {
      if (verified) {
        problems.push_back(
            {"global", s,
             Status::Corruption("the global record names " + std::to_string(record->world_size) +
                                " ranks, the run directory has " + std::to_string(run.ranks.size()) + " rank stores")});
      }
    } else {
      worlds[s] = record->world_size;
    }
  }
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    Store& rank = *run.ranks[r];
    const std::string name = RankName(r);
    verify(rank, name, figures[r + 1]);
    const std::set<int64_t> held = GlobalStepsOfRank(worlds, r);
    auto local_only = internal::LocalOnlySteps(rank, held);
    if (!local_only.ok()) {
      problems.push_back({name, std::nullopt, local_only.status()});
      continue;
    }
    figures[r + 1].local_only = *local_only;
    for (int64_t s : steps) {
      if (!held.count(s)) continue;  // captured by fewer ranks
      auto info = rank.Info(s);
      if (!info.ok()) {
        problems.push_back({name, s, info.status().code() == StatusCode::kNotFound
                                         ? Status::Corruption("a global step this rank's store lacks")
                                         : info.status()});
        continue;
      }
      // The tensors this snapshot says another rank stores.
      auto read = ManifestView::Read(rank, s);
      if (!read.ok()) continue;  // Verify reported it
      ManifestView view = std::move(*read);
      if (view.manifest() == nullptr) continue;
      for (const proto::ExternalTensor& external : view.manifest()->external_tensors()) {
        const std::string what = "tensor `" + view.Name(external.id()) + "` role " + external.role();
        const int source = internal::ParseRankStoreName(external.source());
        if (source < 0 || source >= worlds[s]) {
          problems.push_back(
              {name, s,
               Status::Corruption(what + ": stored in `" + external.source() + "`, no rank store of this run")});
          continue;
        }
        auto held = run.ranks[static_cast<size_t>(source)]->Tensor(s, external.id(), external.role());
        if (!held.ok()) {
          problems.push_back({name, s, Status::Corruption(what + ": stored in " + external.source() +
                                                          ", whose snapshot lacks it (" + held.status().ToString() +
                                                          ")")});
        }
      }
    }
  }

  uint64_t snapshots = 0, chunks = 0, bytes = 0;
  for (const Figures& f : figures) {
    snapshots += f.report.snapshots;
    chunks += f.report.chunks;
    bytes += f.report.bytes;
  }
  if (json) {
    nlohmann::json doc = JsonDocument("verify-run");
    doc["run_dir"] = run_dir;
    doc["step"] = step ? nlohmann::json(*step) : nullptr;
    doc["ok"] = problems.empty();
    doc["world_size"] = run.ranks.size();
    doc["global_steps"] = steps;
    doc["ranks"] = nlohmann::json::array();
    for (size_t r = 0; r < run.ranks.size(); ++r) {
      const Figures& f = figures[r + 1];
      doc["ranks"].push_back({{"rank", r},
                              {"snapshots", f.report.snapshots},
                              {"tensors", f.report.tensors},
                              {"chunks", f.report.chunks},
                              {"bytes", f.report.bytes},
                              {"not_global_steps", f.local_only}});
    }
    doc["problems"] = nlohmann::json::array();
    for (const Problem& p : problems) {
      doc["problems"].push_back({{"store", p.store},
                                 {"step", p.step ? nlohmann::json(*p.step) : nullptr},
                                 {"code", std::string(StatusCodeName(p.status.code()))},
                                 {"message", p.status.message()}});
    }
    PrintJson(doc);
  } else {
    std::cout << "verified run directory " << run_dir << ": " << run.ranks.size() << " ranks, " << steps.size()
              << " global steps, " << snapshots << " snapshots, " << chunks << " chunk references, "
              << HumanBytes(bytes) << " re-hashed: " << (problems.empty() ? "OK" : std::to_string(problems.size()) +
                                                                                    " problems")
              << "\n";
    for (size_t r = 0; r < run.ranks.size(); ++r) {
      if (!figures[r + 1].local_only.empty()) {
        std::cout << RankName(r) << ": snapshots of steps that are not global (garbage; `trainsnap gc` or the next "
                  << "DistributedCheckpointer::Open deletes them): " << StepList(figures[r + 1].local_only) << "\n";
      }
    }
    if (!problems.empty()) {
      Table table({{"STORE"}, {"STEP", Align::kRight}, {"PROBLEM"}});
      for (const Problem& p : problems) {
        table.AddRow({p.store, p.step ? std::to_string(*p.step) : "-", p.status.ToString()});
      }
      std::cout << table.Render();
    }
    std::cout.flush();
  }
  if (problems.empty()) return Status::OK();
  std::set<std::string> where;
  for (const Problem& p : problems) where.insert(p.store);
  std::string stores;
  for (const std::string& s : where) stores += (stores.empty() ? "" : ", ") + s;
  return Status::Corruption("corruption found: " + std::to_string(problems.size()) + " problems (in " + stores + ")");
}

Status DeleteFromRunDirectory(const std::string& run_dir, RunDeletion deletion) {
  const std::string refusing = "refusing to " + deletion.command + " in run directory " + run_dir;
  // A usage error (exit 2) never opens a store.
  if (deletion.ask && !deletion.dry_run) TRAINSNAP_RETURN_IF_ERROR(CanConfirm(deletion.yes).WithContext(refusing));
  TRAINSNAP_ASSIGN_OR_RETURN(Run run, OpenRun(run_dir, /*write=*/!deletion.dry_run, /*check=*/true));
  const std::vector<int64_t> global_steps = StepsOf(run.global_steps);
  if (deletion.rollback.has_value()) {
    TRAINSNAP_RETURN_IF_ERROR(RequireStep(*run.global, *deletion.rollback).status());
    deletion.global.clear();
    for (int64_t s : global_steps) {
      if (s > *deletion.rollback) deletion.global.push_back(s);
    }
  } else if (deletion.command == "prune") {
    deletion.global = internal::StepsOutsidePolicy(global_steps, deletion.policy);
  } else {
    for (int64_t s : deletion.global) TRAINSNAP_RETURN_IF_ERROR(RequireStep(*run.global, s).status());
    std::sort(deletion.global.begin(), deletion.global.end());
  }
  // What each rank store deletes: its snapshots of the doomed global steps,
  // and of every step that is not global (or global with fewer ranks).
  const std::set<int64_t> doomed(deletion.global.begin(), deletion.global.end());
  std::vector<std::vector<int64_t>> local(run.ranks.size());
  std::vector<std::vector<int64_t>> local_only(run.ranks.size());
  size_t local_only_count = 0;
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    auto listed = run.ranks[r]->List();
    if (!listed.ok()) return listed.status().WithContext("list " + run.ranks[r]->path());
    for (const SnapshotInfo& info : *listed) {
      if (!run.held[r].count(info.step)) {
        local_only[r].push_back(info.step);
        local[r].push_back(info.step);
      } else if (doomed.count(info.step)) {
        local[r].push_back(info.step);
      }
    }
    local_only_count += local_only[r].size();
  }
  // The preview: the global steps with every rank's figures summed, and what
  // every store's collection would free.
  DeletionPlan plan;
  TRAINSNAP_ASSIGN_OR_RETURN(DeletionPlan global_plan, PlanDeletion(*run.global, deletion.global));
  plan = global_plan;
  for (SnapshotInfo& info : plan.deleted) info.logical_bytes = info.new_bytes = info.tensors = 0;
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    TRAINSNAP_ASSIGN_OR_RETURN(DeletionPlan rank_plan, PlanDeletion(*run.ranks[r], local[r]));
    for (const SnapshotInfo& info : rank_plan.deleted) {
      for (SnapshotInfo& row : plan.deleted) {
        if (row.step != info.step) continue;
        row.tensors += info.tensors;
        row.logical_bytes += info.logical_bytes;
        row.new_bytes += info.new_bytes;
      }
    }
    plan.reclaimable_chunks += rank_plan.reclaimable_chunks;
    plan.reclaimable_bytes += rank_plan.reclaimable_bytes;
    plan.unreferenced_chunks += rank_plan.unreferenced_chunks;
    plan.unreferenced_bytes += rank_plan.unreferenced_bytes;
  }
  auto print_plan = [&](std::ostream& out) {
    if (plan.deleted.empty() && local_only_count == 0) {
      out << "nothing to delete; " << plan.kept << " global steps kept\n";
      return;
    }
    out << "would delete " << plan.deleted.size() << " global steps"
        << (plan.deleted.empty() ? "" : " (" + StepList(StepsOf(plan.deleted)) + ")") << " from every rank of "
        << run.ranks.size() << ", and " << local_only_count << " local snapshots of steps that are not global; keep "
        << plan.kept << " global steps; frees " << HumanBytes(plan.reclaimable_bytes) << " ("
        << plan.reclaimable_bytes << " bytes) in " << plan.reclaimable_chunks << " chunks\n";
    if (plan.deleted.empty()) return;
    Table table({{"STEP", Align::kRight}, {"TENSORS", Align::kRight}, {"LOGICAL", Align::kRight},
                 {"NEW", Align::kRight}});
    for (const SnapshotInfo& info : plan.deleted) {
      table.AddRow({std::to_string(info.step), std::to_string(info.tensors), HumanBytes(info.logical_bytes),
                    HumanBytes(info.new_bytes)});
    }
    out << table.Render();
    out.flush();
  };
  nlohmann::json doc = JsonDocument(deletion.command + "-run");
  doc["run_dir"] = run_dir;
  doc["dry_run"] = deletion.dry_run;
  doc["world_size"] = run.ranks.size();
  doc["deleted_steps"] = StepsOf(plan.deleted);
  doc["local_only_deleted"] = local_only;
  doc["kept"] = plan.kept;
  doc["reclaimable_chunks"] = plan.reclaimable_chunks;
  doc["reclaimable_bytes"] = plan.reclaimable_bytes;
  doc["gc"] = nullptr;
  doc["bytes_reclaimed"] = 0;
  const bool nothing = plan.deleted.empty() && local_only_count == 0;
  if (deletion.dry_run || (nothing && !deletion.rollback.has_value())) {
    if (deletion.json) {
      PrintJson(doc);
    } else {
      print_plan(std::cout);
    }
    return Status::OK();
  }
  if (deletion.ask && !deletion.yes && !nothing) {
    print_plan(std::cerr);
    TRAINSNAP_RETURN_IF_ERROR(Confirm(deletion.command + " " + std::to_string(plan.deleted.size()) +
                                          " global steps in run directory " + run_dir + "?",
                                      deletion.yes)
                                  .WithContext(refusing));
  }
  // 1. The global records: from here on the steps are not global (one
  // transaction for a rollback, one per step for delete and prune). A kill
  // after it leaves the ranks' snapshots of them, which are then local-only
  // garbage, and a rerun deletes them.
  const std::string rerun = "the run stays consistent; run the command again to finish";
  Status global = deletion.rollback.has_value() ? internal::RollbackGlobalSteps(*run.global, *deletion.rollback)
                                                : internal::DeleteGlobalSteps(*run.global, deletion.global);
  if (!global.ok()) return global.WithContext(rerun);
  TRAINSNAP_KILL_POINT(kKillRunAfterGlobal);
  // 2. Every rank's snapshots of them and of the other non-global steps.
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    Status deleted = internal::DeleteRankSnapshots(*run.ranks[r], local[r]);
    if (!deleted.ok()) return deleted.WithContext(rerun);
    TRAINSNAP_KILL_POINT(kKillRunAfterRank);
  }
  // 3. Garbage.
  auto gc = CollectRun(run);
  if (!gc.ok()) {
    return gc.status().WithContext("deleted global steps " + StepList(StepsOf(plan.deleted)) +
                                   " from every rank, then (run `trainsnap gc` on the run directory)");
  }
  if (deletion.json) {
    doc["gc"] = GcReportJson(*gc);
    doc["bytes_reclaimed"] = gc->bytes_deleted;
    PrintJson(doc);
  } else {
    std::cout << "deleted " << plan.deleted.size() << " global steps"
              << (plan.deleted.empty() ? "" : " (" + StepList(StepsOf(plan.deleted)) + ")") << " from every rank of "
              << run.ranks.size() << " and " << local_only_count
              << " local snapshots of steps that were not global; garbage collection reclaimed "
              << HumanBytes(gc->bytes_deleted) << " (" << gc->bytes_deleted << " bytes) in " << gc->chunks_deleted
              << " chunks\n";
  }
  return FlushStdout().WithContext("the deletion happened, but the report was not written");
}

Status GcRunDirectory(const std::string& run_dir, bool json) {
  TRAINSNAP_ASSIGN_OR_RETURN(Run run, OpenRun(run_dir, /*write=*/true, /*check=*/true));
  std::vector<std::vector<int64_t>> local_only(run.ranks.size());
  size_t count = 0;
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    TRAINSNAP_ASSIGN_OR_RETURN(local_only[r], internal::LocalOnlySteps(*run.ranks[r], run.held[r]));
    TRAINSNAP_RETURN_IF_ERROR(internal::DeleteRankSnapshots(*run.ranks[r], local_only[r]));
    count += local_only[r].size();
  }
  TRAINSNAP_ASSIGN_OR_RETURN(GcReport gc, CollectRun(run));
  if (json) {
    nlohmann::json doc = JsonDocument("gc-run");
    doc["run_dir"] = run_dir;
    doc["world_size"] = run.ranks.size();
    doc["local_only_deleted"] = local_only;
    doc["gc"] = GcReportJson(gc);
    doc["bytes_reclaimed"] = gc.bytes_deleted;
    PrintJson(doc);
  } else {
    std::cout << "deleted " << count << " local snapshots of steps that are not global; garbage collection of "
              << run.ranks.size() + 1 << " stores reclaimed " << HumanBytes(gc.bytes_deleted) << " ("
              << gc.bytes_deleted << " bytes) in " << gc.chunks_deleted << " of " << gc.chunks_scanned
              << " chunks; " << gc.chunks_live << " chunks live\n";
  }
  return FlushStdout().WithContext("garbage collection reclaimed " + std::to_string(gc.bytes_deleted) +
                                   " bytes, but the report was not written");
}

}  // namespace trainsnap::cli
