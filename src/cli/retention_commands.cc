// The commands that delete: rollback, delete, prune, gc. Each reports the
// bytes its garbage collection reclaimed; rollback, delete and prune take
// --dry-run (a read-only preview that also works while a trainer writes).
#include <algorithm>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/confirm.h"
#include "cli/human_format.h"
#include "cli/json_output.h"
#include "cli/progress_bar.h"
#include "cli/retention_plan.h"
#include "cli/run_dir_commands.h"
#include "cli/standard_output.h"
#include "cli/store_access.h"
#include "cli/table.h"
#include "store/retention.h"

namespace trainsnap::cli {

namespace {

struct DeleteOptions {
  std::string store;
  std::vector<int64_t> steps;  // delete: the steps; rollback: one, the step to keep
  RetentionPolicy policy;      // prune
  bool dry_run = false;
  bool yes = false;
  bool json = false;
};

Result<std::unique_ptr<Store>> OpenFor(const DeleteOptions& options) {
  return options.dry_run ? OpenForReading(options.store) : OpenForWriting(options.store);
}

// "2 snapshots (steps 5, 6)", "1 snapshot (step 3)".
std::string Snapshots(const std::vector<int64_t>& steps) {
  if (steps.empty()) return "0 snapshots";
  return std::to_string(steps.size()) + (steps.size() == 1 ? " snapshot (step " : " snapshots (steps ") +
         StepList(steps) + ")";
}

// The human preview: what would go, what it would free. `out` is stdout
// for a dry run, stderr before a confirmation prompt (stdout then carries
// only the result, which may be JSON).
void PrintPlan(std::ostream& out, const DeletionPlan& plan) {
  if (plan.deleted.empty()) {
    out << "nothing to delete; " << plan.kept << " snapshots kept\n";
    return;
  }
  uint64_t logical = 0;
  Table table({{"STEP", Align::kRight}, {"CREATED (UTC)"}, {"TENSORS", Align::kRight}, {"LOGICAL", Align::kRight},
               {"NEW", Align::kRight}});
  for (const SnapshotInfo& info : plan.deleted) {
    logical += info.logical_bytes;
    table.AddRow({std::to_string(info.step), HumanTime(info.created_unix_ms), std::to_string(info.tensors),
                  HumanBytes(info.logical_bytes), HumanBytes(info.new_bytes)});
  }
  out << "would delete " << plan.deleted.size() << " snapshots (" << HumanBytes(logical) << " logical), keep "
      << plan.kept << "; frees " << HumanBytes(plan.reclaimable_bytes) << " (" << plan.reclaimable_bytes
      << " bytes) in " << plan.reclaimable_chunks << " chunks";
  if (plan.unreferenced_chunks > 0) {
    out << ", plus " << HumanBytes(plan.unreferenced_bytes) << " (" << plan.unreferenced_bytes << " bytes) in "
        << plan.unreferenced_chunks << " chunks already unreferenced";
  }
  out << "\n" << table.Render();
  out.flush();
}

nlohmann::json PlanJson(const std::string& command, const DeleteOptions& options, const DeletionPlan& plan) {
  nlohmann::json doc = JsonDocument(command);
  doc["store"] = options.store;
  doc["dry_run"] = options.dry_run;
  doc["deleted_steps"] = StepsOf(plan.deleted);
  doc["kept"] = plan.kept;
  doc["reclaimable_chunks"] = plan.reclaimable_chunks;
  doc["reclaimable_bytes"] = plan.reclaimable_bytes;
  doc["unreferenced_chunks"] = plan.unreferenced_chunks;
  doc["unreferenced_bytes"] = plan.unreferenced_bytes;
  doc["gc"] = nullptr;
  doc["bytes_reclaimed"] = 0;
  return doc;
}

Status PrintPreview(const DeleteOptions& options, const nlohmann::json& doc, const DeletionPlan& plan) {
  if (options.json) {
    PrintJson(doc);
  } else {
    PrintPlan(std::cout, plan);
  }
  return Status::OK();  // main() checks that stdout was written
}

std::string SpacedSteps(const std::vector<int64_t>& steps) {
  std::string out;
  for (int64_t s : steps) out += (out.empty() ? "" : " ") + std::to_string(s);
  return out;
}

// What a collection could not do, on stderr (docs/reliability.md, "Damaged
// packs"): the damaged pack files, the snapshots that need their chunks and
// the ways out. Nothing when the store is whole.
void WarnAboutDamage(const GcReport& gc) {
  if (gc.damaged_packs.empty() && gc.damaged_steps.empty()) return;
  std::cerr << "trainsnap: warning: the store is damaged; garbage collection did everything else\n";
  for (const std::string& pack : gc.damaged_packs) std::cerr << "  " << pack << " (left as it is)\n";
  if (!gc.damaged_steps.empty()) {
    std::cerr << "  snapshots that need the lost chunks: " << StepList(gc.damaged_steps)
              << " (`trainsnap verify` names their tensors)\n"
              << "  ways out: bring the pack files back from a copy; or delete those snapshots (`trainsnap delete "
              << "STORE " << SpacedSteps(gc.damaged_steps) << "`); a training run that captures the same tensors "
              << "again writes the lost chunks anew, which also repairs the older snapshots that share them\n";
  }
  std::cerr.flush();
}

// Prints the result of a deletion followed by garbage collection. The
// deletion happened whatever this returns: a report that could not be
// written is an error that says so (exit 1), never a silent success.
Status PrintDone(const DeleteOptions& options, nlohmann::json doc, std::vector<int64_t> deleted, const GcReport& gc) {
  std::sort(deleted.begin(), deleted.end());
  WarnAboutDamage(gc);
  if (options.json) {
    doc["deleted_steps"] = deleted;
    doc["gc"] = GcReportJson(gc);
    doc["bytes_reclaimed"] = gc.bytes_deleted;
    PrintJson(doc);
  } else {
    std::cout << "deleted " << deleted.size() << " snapshots"
              << (deleted.empty() ? "" : " (" + StepList(deleted) + ")") << "; garbage collection reclaimed "
              << HumanBytes(gc.bytes_deleted) << " (" << gc.bytes_deleted << " bytes) in " << gc.chunks_deleted
              << " chunks; " << gc.chunks_live << " chunks live\n";
  }
  return FlushStdout().WithContext("deleted " + Snapshots(deleted) + " and reclaimed " +
                                   std::to_string(gc.bytes_deleted) + " bytes, but the report was not written");
}

// A failed deletion: says which of the `planned` steps are gone (the store
// is listed again), so the operator never has to guess what happened.
Status DeletionFailed(Store& store, const std::vector<int64_t>& planned, const Status& failure) {
  auto now = store.List();
  if (!now.ok()) return failure.WithContext("the store could not be listed afterwards (run `trainsnap list`)");
  std::set<int64_t> left;
  for (const SnapshotInfo& info : *now) left.insert(info.step);
  std::vector<int64_t> gone;
  for (int64_t step : planned) {
    if (left.count(step) == 0) gone.push_back(step);
  }
  if (gone.empty()) return failure.WithContext("nothing was deleted");
  return failure.WithContext("deleted " + Snapshots(gone) + " of " + std::to_string(planned.size()) +
                             ", garbage not collected (run `trainsnap gc`)");
}

Result<GcReport> CollectAfterDeletion(Store& store, const std::vector<int64_t>& deleted) {
  ProgressBar progress("gc", /*bytes=*/false);
  auto gc = store.CollectGarbage(progress.Callback());
  if (!gc.ok()) {
    return gc.status().WithContext("deleted " + Snapshots(deleted) +
                                   ", then garbage collection failed (run `trainsnap gc`)");
  }
  return gc;
}

// Shared by rollback and delete: plan, preview, confirm, delete, collect.
Status DeleteSteps(const std::string& command, const DeleteOptions& options, Store& store,
                   const std::vector<int64_t>& steps, bool ask, const std::function<Status()>& do_delete) {
  TRAINSNAP_ASSIGN_OR_RETURN(DeletionPlan plan, PlanDeletion(store, steps));
  nlohmann::json doc = PlanJson(command, options, plan);
  if (options.dry_run || plan.deleted.empty()) return PrintPreview(options, doc, plan);
  const std::string refusing = "refusing to delete " + Snapshots(steps);
  if (ask && !options.yes) {
    // Nothing on stdout before the answer: a refusal must not read like a deletion.
    TRAINSNAP_RETURN_IF_ERROR(CanConfirm(options.yes).WithContext(refusing));
    PrintPlan(std::cerr, plan);
    TRAINSNAP_RETURN_IF_ERROR(
        Confirm("delete " + Snapshots(steps) + " from " + options.store + "?", options.yes).WithContext(refusing));
  }
  Status deleted = do_delete();
  if (!deleted.ok()) return DeletionFailed(store, steps, deleted);
  TRAINSNAP_ASSIGN_OR_RETURN(GcReport gc, CollectAfterDeletion(store, steps));
  return PrintDone(options, std::move(doc), steps, gc);
}

RunDeletion ForRun(const std::string& command, const DeleteOptions& options) {
  RunDeletion deletion;
  deletion.command = command;
  deletion.dry_run = options.dry_run;
  deletion.yes = options.yes;
  deletion.json = options.json;
  return deletion;
}

Status RunRollback(const DeleteOptions& options) {
  const int64_t keep = options.steps.front();
  if (IsRunDirectory(options.store)) {
    RunDeletion deletion = ForRun("rollback", options);
    deletion.rollback = keep;
    deletion.ask = true;
    return DeleteFromRunDirectory(options.store, std::move(deletion));
  }
  // A usage error (exit 2) never opens the store: without a terminal to ask
  // on and without --yes, refuse before looking at it.
  if (!options.dry_run) {
    TRAINSNAP_RETURN_IF_ERROR(
        CanConfirm(options.yes).WithContext("refusing to roll back to step " + std::to_string(keep)));
  }
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenFor(options));
  TRAINSNAP_RETURN_IF_ERROR(RequireStep(*store, keep).status());
  auto all = store->List();
  if (!all.ok()) return all.status().WithContext("list snapshots");
  std::vector<int64_t> later;
  for (const SnapshotInfo& info : *all) {
    if (info.step > keep) later.push_back(info.step);
  }
  return DeleteSteps("rollback", options, *store, later, /*ask=*/true, [&] {
    return store->Rollback(keep).WithContext("rollback to step " + std::to_string(keep));
  });
}

Status RunDelete(const DeleteOptions& options) {
  if (IsRunDirectory(options.store)) {
    RunDeletion deletion = ForRun("delete", options);
    deletion.global = options.steps;
    return DeleteFromRunDirectory(options.store, std::move(deletion));
  }
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenFor(options));
  // Every step is checked before anything is deleted (duplicates were
  // refused while parsing).
  for (int64_t step : options.steps) TRAINSNAP_RETURN_IF_ERROR(RequireStep(*store, step).status());
  return DeleteSteps("delete", options, *store, options.steps, /*ask=*/false, [&]() -> Status {
    for (int64_t step : options.steps) {
      TRAINSNAP_RETURN_IF_ERROR(store->Delete(step).WithContext("delete step " + std::to_string(step)));
    }
    return Status::OK();
  });
}

Status RunPrune(const DeleteOptions& options) {
  if (IsRunDirectory(options.store)) {
    RunDeletion deletion = ForRun("prune", options);
    deletion.policy = options.policy;
    return DeleteFromRunDirectory(options.store, std::move(deletion));
  }
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenFor(options));
  auto all = store->List();
  if (!all.ok()) return all.status().WithContext("list snapshots");
  std::vector<int64_t> doomed = internal::StepsOutsidePolicy(StepsOf(*all), options.policy);
  TRAINSNAP_ASSIGN_OR_RETURN(DeletionPlan plan, PlanDeletion(*store, doomed));
  nlohmann::json doc = PlanJson("prune", options, plan);
  if (options.dry_run) return PrintPreview(options, doc, plan);
  auto report = store->Prune(options.policy);
  if (!report.ok()) return DeletionFailed(*store, doomed, report.status());
  return PrintDone(options, std::move(doc), report->deleted_steps, report->gc);
}

Status RunGc(const DeleteOptions& options) {
  if (IsRunDirectory(options.store)) return GcRunDirectory(options.store, options.json);
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenForWriting(options.store));
  GcReport gc;
  {
    ProgressBar progress("gc", /*bytes=*/false);
    TRAINSNAP_ASSIGN_OR_RETURN(gc, store->CollectGarbage(progress.Callback()));
  }
  WarnAboutDamage(gc);
  if (options.json) {
    nlohmann::json doc = JsonDocument("gc");
    doc["store"] = options.store;
    doc["gc"] = GcReportJson(gc);
    doc["bytes_reclaimed"] = gc.bytes_deleted;
    PrintJson(doc);
  } else {
    std::cout << "garbage collection reclaimed " << HumanBytes(gc.bytes_deleted) << " (" << gc.bytes_deleted
              << " bytes) in " << gc.chunks_deleted << " of " << gc.chunks_scanned << " chunks; " << gc.chunks_live
              << " chunks live\n";
  }
  return FlushStdout().WithContext("garbage collection reclaimed " + std::to_string(gc.bytes_deleted) +
                                   " bytes, but the report was not written");
}

void AddCommon(CLI::App* app, DeleteOptions& options, const std::string& command, bool dry_run) {
  app->add_option("store", options.store, "Path of the store, or of a run directory (docs/distributed.md)")
      ->required();
  if (dry_run) app->add_flag("--dry-run", options.dry_run, "Show what would be deleted; change nothing");
  app->add_flag("--json", options.json, "Print JSON (schema trainsnap." + command + "/1, docs/cli.md)");
}

}  // namespace

Command AddRollbackCommand(CLI::App& parent) {
  auto options = std::make_shared<DeleteOptions>();
  options->steps.resize(1);
  CLI::App* app = parent.add_subcommand("rollback", "Delete every snapshot after STEP, then gc");
  app->footer("Deletes every snapshot after STEP, then collects garbage. Shows what it will "
              "delete and asks on a terminal unless --yes; without a terminal it refuses "
              "unless --yes.");
  AddCommon(app, *options, "rollback", /*dry_run=*/true);
  app->add_option("step", options->steps.front(), "The snapshot to roll back to (kept)")
      ->required()
      ->check(StepValidator());
  app->add_flag("-y,--yes", options->yes, "Do not ask for confirmation");
  return {app, [options] { return RunRollback(*options); }};
}

Command AddDeleteCommand(CLI::App& parent) {
  auto options = std::make_shared<DeleteOptions>();
  CLI::App* app = parent.add_subcommand("delete", "Delete snapshots, then gc");
  app->footer("Deletes the given snapshots, then collects garbage.");
  AddCommon(app, *options, "delete", /*dry_run=*/true);
  app->add_option("steps", options->steps, "Snapshot steps to delete")->required()->check(StepValidator());
  // A step named twice is a usage error raised while parsing, before the
  // store is opened: the second deletion of a step could only fail halfway.
  app->callback([options] {
    std::set<int64_t> seen;
    for (int64_t step : options->steps) {
      if (!seen.insert(step).second) {
        throw CLI::ValidationError("steps", "step " + std::to_string(step) + " is named twice");
      }
    }
  });
  return {app, [options] { return RunDelete(*options); }};
}

Command AddPruneCommand(CLI::App& parent) {
  auto options = std::make_shared<DeleteOptions>();
  CLI::App* app = parent.add_subcommand("prune", "Apply a retention policy, then gc");
  app->footer("Keeps the N newest snapshots and every step that is a multiple of K; deletes the "
              "rest, then collects garbage (the library's RetentionPolicy).");
  AddCommon(app, *options, "prune", /*dry_run=*/true);
  app->add_option("--keep-last", options->policy.keep_last, "Newest snapshots to keep (>= 1)")
      ->required()
      ->check(CountValidator(1));
  app->add_option("--keep-every", options->policy.keep_every, "Also keep steps that are multiples of K (>= 1)")
      ->check(CountValidator(1));
  return {app, [options] { return RunPrune(*options); }};
}

Command AddGcCommand(CLI::App& parent) {
  auto options = std::make_shared<DeleteOptions>();
  CLI::App* app = parent.add_subcommand("gc", "Delete unreferenced chunks");
  app->footer("Deletes every chunk no snapshot references; reports the bytes reclaimed.");
  AddCommon(app, *options, "gc", /*dry_run=*/false);
  return {app, [options] { return RunGc(*options); }};
}

}  // namespace trainsnap::cli
