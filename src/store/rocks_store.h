// RocksStore: the Store of include/trainsnap/store.h on a RocksDB
// OptimisticTransactionDB (writable) or a read-only instance.
// The on-disk layout is documented in docs/format.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/thread_pool.hpp>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>
#include <rocksdb/utilities/optimistic_transaction_db.h>

#include "store/chunk_codec.h"
#include "common/mutex.h"
#include "store/chunk_registry.h"
#include "store/chunk_sink.h"
#include "store/column_families.h"
#include "store/commit_log.h"
#include "store/delta_base_cache.h"
#include "store/pack_damage.h"
#include "store/pack_entry.h"
#include "store/pack_set.h"
#include "store/records.h"
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

  const std::string& path() const override { return path_; }
  bool read_only() const override { return read_only_; }
  size_t chunk_bytes() const override { return chunk_bytes_; }
  const StoreOptions& options() const override { return options_; }
  std::vector<std::string> open_notes() const override { return open_notes_; }
  Status Refresh() override;
  std::optional<LostCommits> lost_commits() override;
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

  // The store's worker threads and their count (tests check their priority).
  boost::asio::thread_pool& worker_pool() { return *pool_; }
  int threads() const { return threads_; }

  // trainsnap::PlanCollection (gc_plan.h).
  Result<GcPlan> PlanCollection(const std::vector<int64_t>& steps, const ProgressFn& progress);

 private:
  // --- ChunkSink: what a SnapshotWriterImpl sees of the store --------------------
  const Settings& sink_settings() const override { return sink_settings_; }
  boost::asio::thread_pool& pool() override { return *pool_; }
  ChunkRegistry& registry() override { return registry_; }
  bool DeltasEnabled() const override { return compress_ && keyframe_interval_ > 1; }
  std::shared_ptr<const DeltaBase> DeltaBasesOf(const DeltaBaseKey& key) override { return delta_bases_.Find(key); }
  size_t DeltaBaseBudget() const override { return delta_bases_.budget(); }
  bool MayDelta(const DeltaBase& bases, size_t index) const override;
  bool DeltaKeepsKeyframe() const override { return delta_reference_ == DeltaReference::kKeyframe; }
  // Whether the chunk index holds `hash` (a committed chunk); its stored
  // size when it does.
  Result<std::optional<uint64_t>> LookupChunk(const ChunkHash& hash) override;
  // Appends an encoded chunk to the pack files; nothing refers to it until a
  // commit lists it (NewChunk). Not durable until that commit syncs the packs.
  Result<PackEntry> PutChunk(const ChunkHash& hash, const std::string& encoded) override;
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
  uint32_t AcquireWriterFloor() override;
  void ReleaseWriterFloor(uint32_t floor) override;

  struct DbHandles {
    rocksdb::OptimisticTransactionDB* txn_db = nullptr;  // writable only; same object as db
    rocksdb::DB* db = nullptr;
    std::vector<rocksdb::ColumnFamilyHandle*> handles;  // default, meta, snapshots, tensors, chunks[, chunk_deps]
  };
  static Status OpenRocks(const std::string& path, const StoreOptions& options, bool read_only, rocksdb::Env* env,
                          DbHandles* out);
  static void CloseRocks(DbHandles* h);
  void Adopt(const DbHandles& h);
  // Sets needs_resume_ when RocksDB recorded a background error (a failed
  // flush or compaction) since the last check: the database then refuses
  // writes although no call of this store failed.
  void NoteBackgroundErrors();
  // At RocksDB snapshot `at` (null = the latest state), checked against the
  // stored counts (CheckListed). Caller holds a view (AcquireView).
  Result<std::vector<SnapshotInfo>> ListInView(const rocksdb::Snapshot* at = nullptr);
  // The counts record at `at`; none for a store of format version < 3,
  // which has none. Corruption when a version-3 store lacks it.
  Result<std::optional<StoreCountsData>> ReadCounts(const rocksdb::Snapshot* at);
  // Corruption unless a scan at `at` that found `found` snapshots, the newest
  // `newest`, agrees with the counts record read at the same snapshot.
  // `found` none: only the newest step is checked (Latest).
  Status CheckListed(const rocksdb::Snapshot* at, std::optional<uint64_t> found, std::optional<int64_t> newest);
  // Adds the counts record for `counts` to `batch` (a store of format
  // version 3; older stores are upgraded by a writable open).
  Status PutCounts(rocksdb::WriteBatch* batch, const StoreCountsData& counts);
  // After a batch that wrote `counts` committed: records it in the commit log.
  Status NoteTransaction(const StoreCountsData& counts);
  // Compares the commit log (read before the database was opened) with the
  // database's counts and sets lost_; a writable store then (re)writes the
  // log, keeping an unacknowledged loss in it.
  Status CheckCommitLog(const std::optional<CommitLogState>& log);
  // Refuses (Corruption) while lost commits are not acknowledged.
  Status CheckNoLostCommits(std::string_view what);

  RocksStore() = default;
  Status OpenDb(const std::string& path, const StoreOptions& options, bool read_only, rocksdb::Env* env);
  // After a failed write (or a failed background job) RocksDB refuses
  // further writes; the next write reopens the database (and fails with the
  // reopen's status while the fault lasts). Called by every write operation
  // before it takes db_mu_.
  Status PrepareWrite();
  // Closes and reopens the database; falls back to a read-only instance, or
  // none, when the writable open fails. Caller holds resume_mu_, not db_mu_.
  Status ReopenLocked() REQUIRES(resume_mu_);
  // Holds db_mu_ shared. When a failed recovery left no database it retries
  // the reopen first; an error when that fails too.
  Status AcquireView(std::shared_lock<std::shared_mutex>* lock);
  // What a write saw before it ran, to tell afterwards whether a background
  // job failed (or a recovery ran) under it: then the write met a stale
  // error, not a fault of its own, and is retried once.
  struct WriteMark {
    uint64_t background_errors = 0;
    uint64_t generation = 0;
  };
  WriteMark MarkWrite() const;
  bool FailedInBackground(const WriteMark& mark);
  Status CheckWrite(const rocksdb::Status& s, std::string_view context);
  // The one write path of batches that may be written twice (idempotent):
  // writes `batch` under the held view; when it fails because a background
  // job failed (or a recovery ran) after PrepareWrite looked, recovers and
  // writes it once more. Caller holds the view in *view_lock, not db_mu_
  // otherwise.
  Status WriteWithRecovery(rocksdb::WriteBatch* batch, const rocksdb::WriteOptions& wo, std::string_view context,
                           std::shared_lock<std::shared_mutex>* view_lock);
  Status LoadOrCreateMeta(const StoreOptions& options);
  // Before a writable open of an existing database: that it is a trainsnap
  // store of a known format version whose fixed options match `options`,
  // read through a read-only instance, so that nothing is changed when it
  // is not. A store whose creation stopped before its meta record was
  // written (our column families, all empty) passes: the open completes it.
  static Status CheckExistingStore(const std::string& path, const StoreOptions& options, rocksdb::Env* env);
  // --- disk space (callers hold commit_mu_) ---------------------------------
  // Creates the reserve file (StoreOptions::reserve_bytes) when it is missing
  // and twice its size is free. Best effort: a full disk just leaves it out.
  void RestoreReserve() REQUIRES(commit_mu_);
  // Deletes the reserve file; true when there was one to delete.
  bool ReleaseReserve() REQUIRES(commit_mu_);
  // Before an operation that frees space: releases the reserve when less
  // than its size is free, so that the operation's writes fit.
  void UseReserveIfFull() REQUIRES(commit_mu_);
  // Gives the space of deleted chunks back to the file system: flushes the
  // memtables, compacts the chunk index's keys and compacts the packs
  // (CompactPacks). Caller holds a view and commit_mu_. `report` (may be
  // null) gets the packs removed and the bytes rewritten.
  Status ReclaimSpace(GcReport* report) REQUIRES(commit_mu_);
  // ReclaimSpace; on NoSpace, once more with the reserve's space (reopening
  // the database, which the failure stopped). Restores the reserve after.
  Status GiveSpaceBack(std::shared_lock<std::shared_mutex>* view_lock, GcReport* report) REQUIRES(commit_mu_);
  // --- pack files -----------------------------------------------------------------
  // Opens packs_ (and, writable, removes what no index entry references:
  // RecoverPacks).
  Status OpenPacks();
  // After a crash: deletes pack files that no index entry references and
  // truncates every other pack after the end of its last referenced chunk
  // (bytes a capture appended but never committed). Writable opens only,
  // before any writer exists. Skipped (nothing changed) when an index entry
  // does not parse: Verify reports it. *damage (if given) gets the packs the
  // index names that are missing or shorter than it says (left as they are).
  Status RecoverPacks(std::vector<PackDamage>* damage = nullptr);
  // RecoverPacks on a read-only instance of the existing store at `path`,
  // holding the store's LOCK file meanwhile (so that no writer runs): it
  // writes nothing to the database, so it works on a full disk.
  static Status RecoverPacksBeforeOpen(const std::string& path, rocksdb::Env* env);
  // Removes packs with no live chunk and rewrites the live chunks of packs
  // whose live fraction fell below kCompactBelow, oldest first, within the
  // free space; each pack in three durable steps (copies synced, index
  // entries moved in one synced batch, old pack deleted), so that a crash
  // at any point loses nothing live. Skips packs writers may still append
  // to or commit from. Caller holds a view and commit_mu_.
  Status CompactPacks(GcReport* report) REQUIRES(commit_mu_);
  // The index entry of `hash` at `ro`; none when the index lacks it.
  Result<std::optional<PackEntry>> LookupEntry(const ChunkHash& hash, const rocksdb::ReadOptions& ro);
  // The encoded bytes of chunk `hash` (its index entry read at `ro`) into
  // *out. Corruption when the index lacks it or its pack is short.
  Status ReadChunkValue(const ChunkHash& hash, const rocksdb::ReadOptions& ro, std::string* out);
  // Reads chunk `ref`, whose index entry is `entry`, into dst (raw chunks
  // straight from the pack, others decoded from a buffer) and checks its
  // hash. A read that fails on the pack file is retried once at the place
  // the index names now (a compaction moved the chunk meanwhile).
  Status ReadChunkAt(const ChunkRef& ref, PackEntry entry, uint8_t* dst);
  // Which step of a chunk read failed: the pack file (missing, short,
  // unreadable) or the bytes read (decode, hash).
  enum class ReadFailure { kPack, kContent };
  // Reads chunk `ref` at `entry` into dst and checks its hash; on failure
  // *failure says where.
  Status ReadAndCheck(const ChunkRef& ref, const PackEntry& entry, uint8_t* dst, ReadFailure* failure);

  // --- damage (rocks_store_damage.cc) ---------------------------------------------
  // Marks unusable (ChunkRegistry::MarkUnusable) every chunk whose bytes
  // `damage` lost, and the deltas of them; packs noted before with the same
  // size are skipped. Caller holds a view. Read-only stores: no-op.
  Status NoteDamage(const std::vector<PackDamage>& damage);
  // Marks `hashes` and every delta chunk built on them (chunk_deps) unusable.
  Status MarkUnusableWithDeltas(std::vector<ChunkHash> hashes);
  // After a read of chunk `hash` at `entry` failed for good: a writable store
  // looks at the pack file (kPack) or marks the chunk unusable (kContent).
  void NoteFailedRead(const ChunkHash& hash, const PackEntry& entry, ReadFailure failure);
  // The steps whose snapshots reference an unusable chunk (or whose records
  // cannot be read), ascending. Caller holds a view.
  Result<std::vector<int64_t>> StepsWithUnusableChunks();
  // Sets report->damaged_steps (StepsWithUnusableChunks). Caller holds a view.
  Status NameDamagedSteps(GcReport* report);

  // --- read-only stores: the chunk index as the writer holds it now -------------
  // A read-only instance sees the store as of its open (or Refresh). A chunk
  // read that failed there (its pack compacted away, or the chunk collected
  // with its deleted snapshot since) is looked up again in a newer instance,
  // opened after the failure: the chunk moved (read it there) or is gone. A
  // writable store's own index is current. Returns the entry now (none: no
  // longer stored). A pack for which a newer instance still named the failed
  // bytes is really damaged and not looked up again.
  Result<std::optional<PackEntry>> CurrentEntry(const ChunkHash& hash, const PackEntry& failed);
  // Whether a snapshot is stored at `step` now (read-only: in a newer
  // instance than this store's view).
  Result<bool> StoredNow(int64_t step);
  // A read-only instance newer than the store's own view.
  struct LatestView {
    DbHandles handles;
    uint64_t id = 0;  // latest_opens_ when it was opened
    ~LatestView() { CloseRocks(&handles); }
    rocksdb::ColumnFamilyHandle* cf(ColumnFamily which) const { return handles.handles[static_cast<size_t>(which)]; }
  };
  // The newest instance opened after latest_opens_ was `since` (one is
  // opened now when there is none).
  Result<std::shared_ptr<LatestView>> NewerView(uint64_t since);
  Status WarmChunkSizes();
  Status CheckWritable(std::string_view what) const;
  // The store's answer for a chunk that a read found no longer stored.
  static Status ChunkGone(const ChunkHash& hash);
  // Tensor() without the check of its chunks against the unusable ones.
  Result<TensorRecord> CatalogTensor(int64_t step, uint64_t param_id, std::string_view role);
  // Read-only stores: whether table file `name` is live in a newer instance
  // (one that a failed read of it in this view did not find may have been
  // compacted away by the writer since).
  bool TableLiveNow(const std::string& name);
  // The snapshot record of `step` as `ro` sees it (its snapshot, if any);
  // nullopt when there is none.
  Result<std::optional<SnapshotRecordData>> ReadSnapshotRecord(int64_t step,
                                                               const rocksdb::ReadOptions& ro = rocksdb::ReadOptions());
  // The stored steps at `at` (null = a snapshot of its own), ascending;
  // checked against the counts record unless `check_counts` is false.
  Result<std::vector<int64_t>> ListSteps(const rocksdb::Snapshot* at = nullptr, bool check_counts = true);
  // OK when snapshot `step` is committed; NotFound otherwise.
  Status CheckStored(int64_t step);
  // Deletes the snapshots `steps` (and their tensor records) in one atomic
  // batch; collects the chunk refs of their records into *released if given.
  Status DeleteSteps(const std::vector<int64_t>& steps, std::vector<ChunkRef>* released);
  // The hashes every committed tensor record references, and their delta
  // bases. The records of `excluded` steps are checked but not counted (a
  // preview of deleting them).
  Status CollectLiveChunks(std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher>* live,
                           const std::set<int64_t>& excluded = {});
  // Deletes the unpinned `candidates` (sizes[i] = encoded bytes of candidates[i])
  // and adds them to `report`.
  Result<GcReport> EraseChunks(std::vector<ChunkHash> candidates, const std::vector<uint64_t>& sizes,
                               GcReport report);
  Result<GcReport> CollectGarbageLocked(const ProgressFn& progress) REQUIRES(commit_mu_);
  // full_gc: scan every chunk afterwards; otherwise only those the deleted
  // snapshots referenced (cheap enough to run after every commit). Never
  // deletes `committed` (the snapshot whose commit runs the prune).
  Result<PruneReport> PruneLocked(const RetentionPolicy& policy, bool full_gc,
                                  std::optional<int64_t> committed = std::nullopt) REQUIRES(commit_mu_);
  // With retention on (keep_last > 0): InvalidArgument when `step` is below
  // the latest stored step (see RetentionPolicy). Caller holds commit_mu_.
  Status CheckRetentionKeeps(int64_t step) REQUIRES(commit_mu_);
  // Decodes the encoded chunk `value` (ref.raw_bytes long) into dst and
  // checks its hash; a delta chunk's base is read, decoded and hash-checked
  // first (recursively). The base's depth is not checked against the
  // delta's header: the base's bytes are what its hash names, whichever
  // encoding holds them (captures in flight share one encoding of a chunk,
  // ChunkRegistry; a store written before that may index another one). A
  // chain longer than `depth_budget` links (a cycle) is Corruption.
  Status ReadChunkInto(const ChunkRef& ref, std::string_view value, uint8_t* dst,
                      int depth_budget = kMaxDeltaDepth);
  // One chunk of a ReadTensors call.
  struct ChunkRead {
    const ChunkRef* ref;
    uint8_t* dst;
    size_t read;   // index into the reads
    size_t index;  // chunk index within its tensor
  };
  // Reads and decodes chunks[begin, end): one MultiGet of their index
  // entries, then ReadChunkAt each; the first error per read goes to
  // errors[read], guarded by errors_mu.
  void ReadChunkBatch(const std::vector<ChunkRead>& chunks, size_t begin, size_t end,
                      const std::vector<TensorRead>& reads, std::vector<Status>* errors, std::mutex* errors_mu);
  // Calls `visit` with the key and value of every tensor record of `step`
  // (tensors CF, snapshot format 1) at `ro`, in key order; stops at the
  // first error `visit` returns.
  using RecordVisitor = std::function<Status(std::string_view key, std::string_view value)>;
  Status ScanTensorRecords(int64_t step, const rocksdb::ReadOptions& ro, const RecordVisitor& visit);
  // Reads, decodes (hash checked) and parses one record group at `ro`.
  Result<std::vector<TensorRecord>> ReadRecordGroup(const RecordGroupRef& group, const rocksdb::ReadOptions& ro);
  // Reads and decodes (hash checked) a metadata chunk (a record group's or a
  // shared manifest's) at `ro`; errors name `where`.
  Result<std::string> ReadMetadataChunk(const ChunkRef& chunk, const std::string& where,
                                        const rocksdb::ReadOptions& ro);
  // The shared manifest bytes of a snapshot whose record is `data`.
  Result<std::string> ReadSharedManifest(const SnapshotRecordData& data, const rocksdb::ReadOptions& ro);
  // The tensor records of a snapshot whose record is `data`, at `ro`: from
  // its record groups (format version 2) or the tensors CF (version 1).
  Result<std::vector<TensorRecord>> SnapshotTensors(const SnapshotRecordData& data, const rocksdb::ReadOptions& ro);
  // Adds to `live` every chunk a delta chain of a live chunk needs.
  Status AddDeltaBases(std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher>* live);
  // hash -> base hash for every delta chunk (chunk_deps CF).
  Status ReadChunkDeps(std::unordered_map<ChunkHash, ChunkHash, ChunkHashHasher>* deps);

  // Store-level checks of Verify (whole store): table-file checksums, pack
  // files, every column family against the counts, leftovers, lost commits.
  void VerifyStore(VerifyReport* report);
  // Steps with tensor records but no snapshot record, and their record
  // counts, read at `at`.
  Status FindLeftovers(const rocksdb::Snapshot* at, std::map<int64_t, uint64_t>* leftovers);

  // The records of the last grouped snapshot Tensor() looked up: the
  // checkpointer looks up every unchanged tensor of one snapshot in a row
  // (src/capture/stage.cc), and a grouped look-up would otherwise parse the
  // snapshot record (manifest included) and decode a group per call. Reset
  // by ResetTensorCache() after every commit and delete write and on every
  // (re)open; a look-up that read the database before a reset does not
  // fill the cache (the generation changed).
  Mutex tensor_cache_mu_;
  uint64_t tensor_cache_generation_ GUARDED_BY(tensor_cache_mu_) = 0;
  std::optional<int64_t> tensor_cache_step_ GUARDED_BY(tensor_cache_mu_);
  std::map<std::pair<uint64_t, std::string>, TensorRecord> tensor_cache_ GUARDED_BY(tensor_cache_mu_);
  void ResetTensorCache() {
    MutexLock lock(&tensor_cache_mu_);
    ++tensor_cache_generation_;
    tensor_cache_step_.reset();
    tensor_cache_.clear();
  }

  std::string path_;
  bool read_only_ = false;
  uint32_t format_version_ = 0;  // of the meta record, as opened
  size_t chunk_bytes_ = 0;
  int zstd_level_ = 1;
  bool compress_ = true;
  bool sync_ = true;
  int threads_ = 1;
  Settings sink_settings_;  // chunk_bytes_, compress_, zstd_level_ for writers
  RetentionPolicy retention_;
  rocksdb::Env* env_ = nullptr;  // not owned; null = default
  // Read-only stores swap the RocksDB instance on Refresh(): readers hold it
  // shared, Refresh exclusive. Writable stores never swap it.
  std::shared_mutex db_mu_;

  rocksdb::OptimisticTransactionDB* txn_db_ = nullptr;  // writable only; same object as db_
  rocksdb::DB* db_ = nullptr;                           // owned
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  rocksdb::ColumnFamilyHandle* meta_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* snapshots_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* tensors_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* chunks_cf_ = nullptr;
  // Null only for a read-only open of a store written before deltas existed.
  rocksdb::ColumnFamilyHandle* chunk_deps_cf_ = nullptr;
  int keyframe_interval_ = 16;
  DeltaReference delta_reference_ = DeltaReference::kKeyframe;
  DeltaBaseCache delta_bases_;

  // The file system of env_ (or the default one): pack files go through it.
  std::shared_ptr<rocksdb::FileSystem> fs_;
  std::unique_ptr<PackSet> packs_;
  Mutex floors_mu_;
  std::multiset<uint32_t> writer_floors_ GUARDED_BY(floors_mu_);

  std::unique_ptr<boost::asio::thread_pool> pool_;
  ChunkRegistry registry_;
  // Writable stores: packs found damaged (NoteDamage), by number.
  Mutex damage_mu_;
  std::map<uint32_t, PackDamage> damaged_packs_ GUARDED_BY(damage_mu_);
  // Read-only stores: the newest instance opened for CurrentEntry, the
  // count of those opened, and the packs one confirmed damaged.
  Mutex latest_mu_;
  std::shared_ptr<LatestView> latest_ GUARDED_BY(latest_mu_);
  uint64_t latest_opens_ GUARDED_BY(latest_mu_) = 0;
  std::set<uint32_t> confirmed_damaged_ GUARDED_BY(latest_mu_);
  // Serializes commits, deletes and garbage collection. Lock order:
  // commit_mu_, then resume_mu_, then db_mu_ (a view), then the others.
  Mutex commit_mu_ ACQUIRED_BEFORE(resume_mu_);
  Mutex resume_mu_;  // serializes recoveries
  std::atomic<bool> needs_resume_{false};
  // RocksDB's count of background errors (failed flushes, compactions) seen
  // so far by this instance of the database; reset on reopen.
  std::atomic<uint64_t> background_errors_seen_{0};
  // Bumped by every reopen.
  std::atomic<uint64_t> generation_{0};
  Status recovery_error_;  // why db_ is null; guarded by db_mu_
  // Writable stores: the commit log, written under commit_mu_.
  std::unique_ptr<CommitLog> commit_log_;
  Mutex lost_mu_;
  std::optional<LostCommits> lost_ GUARDED_BY(lost_mu_);
  StoreOptions options_;   // as opened; for reopening after a failure
  std::vector<std::string> open_notes_;  // set by the open, then constant
  bool reserve_present_ GUARDED_BY(commit_mu_) = false;  // the reserve file exists
  // Commits since the last flush this store asked for.
  int commits_since_flush_ GUARDED_BY(commit_mu_) = 0;
  // Live chunk bytes in packs after the last ReclaimSpace.
  uint64_t live_pack_bytes_ GUARDED_BY(commit_mu_) = 0;
  uint64_t deleted_since_reclaim_ GUARDED_BY(commit_mu_) = 0;  // chunk bytes retention deleted since then
};

}  // namespace trainsnap::internal
