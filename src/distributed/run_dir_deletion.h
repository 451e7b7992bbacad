// Deleting steps from a run directory: the one protocol that
// DistributedCheckpointer (retention, rollback, Open) and the CLI (rollback,
// delete, prune, gc) follow. The invariant: every global step S is in the
// stores rank-00000 .. rank-<N-1>, N being S's world size (its global
// record). The order that keeps it at every crash point:
//   1. the global records (DeleteGlobalSteps, RollbackGlobalSteps): from
//      here on the steps are not global;
//   2. the rank stores' snapshots of them (DeleteRankSnapshots), and their
//      snapshots of steps that are not global (LocalOnlySteps), but only
//      while no capture is in flight: a capture commits locally before it
//      becomes global;
//   3. garbage collection of the stores that deleted something.
// A crash between two leaves rank snapshots of steps that are not global:
// garbage that the next deletion, `trainsnap gc` or the next
// DistributedCheckpointer::Open removes. No LibTorch.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

// How many rank stores `run_dir` holds: rank-00000, rank-00001, ... up to the
// first that is not a directory, counting from rank `from` (rank stores
// below it may be being created). A run resumed on fewer ranks keeps the
// stores of the ranks it lost (their snapshots are read and deleted by the
// ranks left).
int CountRankStores(const std::string& run_dir, int from = 0);

// Step 1: deletes the global records of `steps` (ascending) that `global`
// holds, one transaction each, in order, up to the first failure (its error);
// `deleted` (optional) counts the steps of `steps` gone since the call
// (deleted now or absent already).
Status DeleteGlobalSteps(Store& global, const std::vector<int64_t>& steps, size_t* deleted = nullptr);
// Step 1 of a rollback: every global record after `step`, one transaction.
// NotFound when `step` is not global.
Status RollbackGlobalSteps(Store& global, int64_t step);

// Step 2: deletes the snapshots of `steps` that `rank` holds (a store of a
// smaller world size, or a rerun after a crash, holds some or none), each
// one transaction, up to the first failure (its error, naming the store
// and step).
Status DeleteRankSnapshots(Store& rank, const std::vector<int64_t>& steps);
// Step 2 of a rollback: every snapshot of `rank` after `step`, in one
// transaction when `rank` holds `step` (Store::Rollback), else one each.
Status DeleteRankSnapshotsAfter(Store& rank, int64_t step);
// `rank`'s snapshots of steps not in `global` (the global steps whose world
// size is above its rank), ascending: garbage, unless a capture is in flight.
Result<std::vector<int64_t>> LocalOnlySteps(Store& rank, const std::set<int64_t>& global);

}  // namespace trainsnap::internal
