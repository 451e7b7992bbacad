// RocksStore: the Store of include/trainsnap/store.h (docs/code-map.md, "The
// store's parts"). A facade over the store's parts: the database session
// (DbSession), the chunk store (ChunkStore), the catalog (Catalog) and the
// space reserve, with garbage collection, verification and statistics as
// operations over them. The facade owns the commit order: commits, deletes,
// retention, garbage collection and repairs run one at a time under
// commit_mu_, which comes before every lock of the parts.
#pragma once

#include <boost/asio/thread_pool.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "store/catalog.h"
#include "store/chunk_sink.h"
#include "store/chunk_store.h"
#include "store/db_session.h"
#include "store/space_reserve.h"
#include "trainsnap/gc_plan.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

class RocksStore final : public Store, private ChunkSink {
 public:
  // `env` (not owned; null = RocksDB's default) lets tests inject file-system
  // faults; it must outlive the store.
  static Result<std::unique_ptr<Store>> OpenWritable(const std::string& path, const StoreOptions& options,
                                                     rocksdb::Env* env = nullptr);
  static Result<std::unique_ptr<Store>> OpenReadOnlyInstance(const std::string& path, rocksdb::Env* env = nullptr);
  ~RocksStore() override;

  const std::string& path() const override { return session_->path(); }
  bool read_only() const override { return session_->read_only(); }
  size_t chunk_bytes() const override { return catalog_->chunk_bytes(); }
  const StoreOptions& options() const override { return options_; }
  std::vector<std::string> open_notes() const override { return open_notes_; }
  Status Refresh() override;
  std::optional<LostCommits> lost_commits() override { return catalog_->lost_commits(); }
  Status AcknowledgeLostCommits() override;

  Result<std::vector<SnapshotInfo>> List() override;
  Result<std::optional<int64_t>> Latest() override;
  Result<SnapshotInfo> Info(int64_t step) override;
  Result<bool> Contains(int64_t step) override;
  Result<std::string> Manifest(int64_t step) override;
  Result<std::string> SharedManifest(int64_t step) override;
  Result<std::vector<TensorRecord>> Tensors(int64_t step) override;
  Result<TensorRecord> Tensor(int64_t step, uint64_t param_id, std::string_view role) override;
  Status ReadTensor(const TensorRecord& record, void* dst, size_t dst_bytes) override;
  Status ReadTensors(const std::vector<TensorRead>& reads) override;

  Result<std::unique_ptr<SnapshotWriter>> BeginSnapshot(int64_t step, const SnapshotOptions& options) override;
  Status Delete(int64_t step) override;
  Status Rollback(int64_t step) override;
  Result<GcReport> CollectGarbage(const ProgressFn& progress) override;
  Result<VerifyReport> Verify(std::optional<int64_t> step, const ProgressFn& progress) override;
  Result<PruneReport> Prune(const RetentionPolicy& policy) override;
  Result<StoreStats> Stats(const ProgressFn& progress) override;
  Result<RepairReport> Repair() override;
  Result<GcPlan> PlanCollection(const std::vector<int64_t>& steps, const ProgressFn& progress) override;

  // DropSnapshots (store/snapshot_drop.h).
  Result<PruneReport> DropSnapshots(const std::vector<int64_t>& steps);

  // The store's worker threads and their count (tests check their priority).
  boost::asio::thread_pool& worker_pool() { return *pool_; }
  int threads() const { return threads_; }

 private:
  // --- ChunkSink: what a SnapshotWriterImpl sees of the store --------------------
  const Settings& sink_settings() const override { return sink_settings_; }
  boost::asio::thread_pool& pool() override { return *pool_; }
  ChunkRegistry& registry() override { return chunks_->registry(); }
  bool DeltasEnabled() const override { return options_.compress && options_.keyframe_interval > 1; }
  std::shared_ptr<const DeltaBase> DeltaBasesOf(const DeltaBaseKey& key) override {
    return chunks_->delta_bases().Find(key);
  }
  size_t DeltaBaseBudget() const override { return chunks_->delta_bases().budget(); }
  bool MayDelta(const DeltaBase& bases, size_t index) const override;
  bool DeltaKeepsKeyframe() const override { return options_.delta_reference == DeltaReference::kKeyframe; }
  Result<std::optional<uint64_t>> LookupChunk(const ChunkHash& hash) override { return chunks_->LookupChunk(hash); }
  Result<PackEntry> PutChunk(const ChunkHash& hash, const std::string& encoded) override {
    return chunks_->PutChunk(hash, encoded);
  }
  Result<TensorRecord> CommittedTensor(int64_t step, uint64_t param_id, std::string_view role) override {
    return Tensor(step, param_id, role);
  }
  // Commits one snapshot atomically, then applies retention. First the pack
  // files are synced; then one batch writes the index entries of the
  // commit's chunks (and the chunk_deps entries of the deltas among them),
  // the records and the manifest. With groups (snapshot format 2): the
  // snapshot record lists them (the writer has written and pinned their
  // chunks) and the records are not written one by one. Without: they go to
  // the tensors CF (snapshot format 1). Publishes the delta bases after.
  Result<SnapshotInfo> CommitSnapshot(SnapshotCommit commit, uint64_t* metadata_bytes) override;
  uint32_t AcquireWriterFloor() override { return chunks_->AcquireWriterFloor(); }
  void ReleaseWriterFloor(uint32_t floor) override { chunks_->ReleaseWriterFloor(floor); }

  RocksStore(const std::string& path, bool read_only, rocksdb::Env* env, const StoreOptions& options);
  // Before a writable open of an existing database: that it is a trainsnap
  // store of a known format version whose fixed options match `options`,
  // read through a read-only instance, so that nothing is changed when it
  // is not. A store whose creation stopped before its meta record was
  // written (our column families, all empty) passes: the open completes it.
  static Status CheckExistingStore(const std::string& path, const StoreOptions& options, rocksdb::Env* env);
  // Opens the session, the packs and the catalog (create: a new store).
  Status OpenParts(bool create);
  Status CheckWritable(std::string_view what) const;
  // The next snapshot mostly references the chunks of the latest one;
  // knowing their sizes up front saves an index read per deduplicated chunk
  // on the first capture after opening. Best effort.
  void WarmChunkSizes();
  // With retention on (keep_last > 0): InvalidArgument when `step` is below
  // the latest stored step (see RetentionPolicy). Caller holds a view.
  Status CheckRetentionKeeps(int64_t step) REQUIRES(commit_mu_);
  // How ReclaimSpace tidies the chunk index after compacting the packs.
  enum class IndexTidy {
    // Waits for the memtables' flush and compacts the chunk index's keys
    // (CollectGarbage, Prune: the caller asked for the space now).
    kNow,
    // Starts the flush and returns; the chunk index's tombstones go with
    // RocksDB's background compactions (ColumnFamilies: compaction on
    // deletion). Retention's reclaim on the commit path: a drop then costs
    // the pack work only, no SST and MANIFEST writes and their fsyncs.
    kInBackground,
  };
  // Gives the space of deleted chunks back to the file system: compacts the
  // packs, flushes the memtables and (`tidy`) compacts the chunk index's keys.
  // Caller holds a view. `report` (may be null) gets the packs removed and
  // the bytes rewritten.
  Status ReclaimSpace(GcReport* report, IndexTidy tidy) REQUIRES(commit_mu_);
  // Retention's bound on garbage: adds `deleted` chunk bytes to those
  // deleted since the last ReclaimSpace and runs it once they reach
  // kMaxGarbageRatio of the live pack bytes (IndexTidy::kInBackground).
  // Whether it ran (a failure is retried the next time). Caller holds a view.
  bool ReclaimWhenDue(uint64_t deleted, GcReport* report) REQUIRES(commit_mu_);
  // ReclaimSpace(kNow); on NoSpace, once more with the reserve's space (reopening
  // the database, which the failure stopped). Restores the reserve after.
  Status GiveSpaceBack(std::shared_lock<std::shared_mutex>* view_lock, GcReport* report) REQUIRES(commit_mu_);
  // Runs `attempt` (a write that changes nothing when it fails) with the
  // reserve's space released first when the disk is full, and once more
  // without the reserve when it failed with NoSpace.
  Status WithReserve(const std::function<Status()>& attempt) REQUIRES(commit_mu_);
  // Delete and Rollback: once `step` is known stored, deletes the steps
  // `pick` chooses, under commit_mu_, the reserve and a view.
  Status DeleteChosenSteps(int64_t step, const std::string& context,
                           const std::function<Result<std::vector<int64_t>>()>& pick);

  StoreOptions options_;  // as opened; defaults for a read-only store
  int threads_ = 1;
  Settings sink_settings_;
  std::vector<std::string> open_notes_;  // set by the open, then constant
  // The parts, in the order they are built and the reverse of the order
  // they go: the pool's tasks read the parts, and the parts read the session.
  std::unique_ptr<boost::asio::thread_pool> pool_;
  std::unique_ptr<DbSession> session_;
  std::unique_ptr<ChunkStore> chunks_;
  std::unique_ptr<Catalog> catalog_;

  // Serializes commits, deletes, retention, garbage collection, repairs and
  // the reserve. Lock order: commit_mu_, then the session's locks, then the
  // parts' leaf locks.
  Mutex commit_mu_;
  SpaceReserve reserve_ GUARDED_BY(commit_mu_);
  // Commits since the last flush this store asked for.
  int commits_since_flush_ GUARDED_BY(commit_mu_) = 0;
  uint64_t deleted_since_reclaim_ GUARDED_BY(commit_mu_) = 0;  // chunk bytes retention deleted since then
};

}  // namespace trainsnap::internal
