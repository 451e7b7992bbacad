// GarbageCollector: which chunks a store still needs, and the deletion of
// the others (docs/format.md, "Garbage collection"); retention's deletion of
// snapshots (Prune), the preview of a deletion (Plan), and the snapshots
// that need damaged chunks. An operation over the catalog and the chunk
// store, made for one call: the caller holds a view of the session and,
// for Collect and Prune, the store's commit lock.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "store/catalog.h"
#include "store/chunk_store.h"
#include "store/db_session.h"
#include "trainsnap/gc_plan.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

class GarbageCollector {
 public:
  GarbageCollector(DbSession& session, Catalog& catalog, ChunkStore& chunks)
      : session_(session), catalog_(catalog), chunks_(chunks) {}

  // The hashes every committed tensor record references, and their delta
  // bases. The records of `excluded` steps are checked but not counted (a
  // preview of deleting them). Records are read at one RocksDB snapshot and
  // counted against each snapshot's tensor count: a scan that ended early
  // without an error (docs/reliability.md) refuses the collection
  // (Corruption) instead of taking live chunks for garbage.
  Status CollectLiveChunks(std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher>* live,
                           const std::set<int64_t>& excluded = {});
  // Deletes every chunk no snapshot needs and no writer pins.
  Result<GcReport> Collect(const ProgressFn& progress);
  // PlanCollection (gc_plan.h). Needs a view only.
  Result<GcPlan> Plan(const std::vector<int64_t>& steps, const ProgressFn& progress);
  // Deletes the snapshots `policy` does not keep (in one batch, WAL synced
  // when `sync`), never `committed` (the snapshot whose commit runs the
  // prune). full_gc: a full collection follows; otherwise only the chunks
  // the deleted snapshots referenced are candidates (cheap enough to run
  // after every commit).
  Result<PruneReport> Prune(const RetentionPolicy& policy, bool full_gc, bool sync,
                            std::optional<int64_t> committed = std::nullopt);
  // Deletes the snapshots of `steps` the store holds (the others are
  // skipped; in one batch, WAL synced when `sync`), then the chunks only
  // they referenced, and the delta bases only those needed: no scan of the
  // chunk index. PruneReport::deleted_steps: the steps deleted, ascending.
  Result<PruneReport> DeleteAndCollect(const std::vector<int64_t>& steps, bool sync);
  // The steps whose snapshots reference an unusable chunk (or whose records
  // cannot be read), ascending.
  Result<std::vector<int64_t>> StepsWithUnusableChunks();
  // Sets report->damaged_steps (StepsWithUnusableChunks).
  Status NameDamagedSteps(GcReport* report);

 private:
  rocksdb::DB* db() const { return session_.db(); }

  DbSession& session_;
  Catalog& catalog_;
  ChunkStore& chunks_;
};

}  // namespace trainsnap::internal
