// The commands on a run directory of DistributedCheckpointer
// (docs/distributed.md): global/ holds one record per global step, each
// rank-NNNNN/ a rank's store. Every mutating command keeps the invariant
// "every global step is in every rank's store": it deletes global records
// first (a step stops being global), then the ranks' snapshots, then
// collects garbage, so that a kill at any point leaves a consistent run
// whose rerun completes. Local snapshots of steps that are not global are
// garbage (DistributedCheckpointer::Open deletes them too): every mutating
// command deletes them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::cli {

// docs/distributed.md, "Run-directory layout": global/ beside rank-00000/.
bool IsRunDirectory(const std::string& path);

// Kill points of the run-directory deletions (crash tests; store/kill_point.h).
inline constexpr char kKillRunAfterGlobal[] = "cli.run.after_global";  // global records deleted, ranks not yet
inline constexpr char kKillRunAfterRank[] = "cli.run.after_rank";      // after each rank's deletion (nth = rank + 1)

// verify RUN_DIR [STEP]: every store re-hashed (Store::Verify), every
// global record parsed, its world size that of the run, every global step
// in every rank's store, and every tensor a rank's snapshot says another
// rank stores present there. Corruption (exit 3) when anything is wrong.
Status VerifyRunDirectory(const std::string& run_dir, std::optional<int64_t> step, bool json);

// What a deletion on a run directory removes.
struct RunDeletion {
  std::string command;              // "rollback", "delete", "prune": JSON schema and messages
  std::vector<int64_t> global;      // global steps to delete (existing, ascending)
  std::optional<int64_t> rollback;  // rollback: the step kept (Store::Rollback on every store)
  RetentionPolicy policy;           // prune: computed from the global steps once opened
  bool dry_run = false;
  bool yes = false;
  bool ask = false;  // confirm first (rollback)
  bool json = false;
};
// `steps` for delete; none for rollback (from options.rollback) or prune.
Status DeleteFromRunDirectory(const std::string& run_dir, RunDeletion deletion);

// gc RUN_DIR: deletes the ranks' local snapshots of non-global steps, then
// collects every store's garbage.
Status GcRunDirectory(const std::string& run_dir, bool json);

}  // namespace trainsnap::cli
