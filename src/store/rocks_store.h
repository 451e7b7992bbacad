// RocksStore: the Store of include/trainsnap/store.h on a RocksDB
// OptimisticTransactionDB (writable) or a read-only instance.
// The on-disk layout is documented in docs/format.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/thread_pool.hpp>
#include <rocksdb/db.h>
#include <rocksdb/utilities/optimistic_transaction_db.h>

#include "store/chunk_registry.h"
#include "store/delta_base_cache.h"
#include "store/records.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

class RocksStore final : public Store {
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
  Status Refresh() override;

  Result<std::vector<SnapshotInfo>> List() override;
  Result<std::optional<int64_t>> Latest() override;
  Result<SnapshotInfo> Info(int64_t step) override;
  Result<std::string> Manifest(int64_t step) override;
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

  // --- for SnapshotWriterImpl ---------------------------------------------
  ChunkRegistry& registry() { return registry_; }
  int zstd_level() const { return zstd_level_; }
  bool compress() const { return compress_; }
  boost::asio::thread_pool& pool() { return *pool_; }
  int threads() const { return threads_; }
  // Whether the chunks CF holds `hash`; its stored size when it does.
  Result<std::optional<uint64_t>> LookupChunk(const ChunkHash& hash);
  // Plain (non-transactional) write of an encoded chunk; WAL on, not synced:
  // the commit's synced WAL write makes it durable. A delta chunk (`base`
  // given) also gets its chunk_deps entry, in the same write batch.
  Status PutChunk(const ChunkHash& hash, const std::string& encoded, const ChunkHash* base = nullptr);
  // The record of (param_id, role) at `step`, for AddUnchangedTensor.
  Result<TensorRecord> CommittedTensor(int64_t step, uint64_t param_id, std::string_view role) {
    return Tensor(step, param_id, role);
  }
  int keyframe_interval() const { return keyframe_interval_; }
  DeltaReference delta_reference() const { return delta_reference_; }
  // Delta bases: the latest raw bytes this process committed per tensor.
  DeltaBaseCache& delta_bases() { return delta_bases_; }
  // Commits the records of one snapshot atomically; applies retention.
  Result<SnapshotInfo> CommitSnapshot(SnapshotInfo info, const std::vector<TensorRecord>& records,
                                      const std::string& manifest, bool replace_existing);

 private:
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
  // At RocksDB snapshot `at` (null = the latest state).
  Result<std::vector<SnapshotInfo>> ListLocked(const rocksdb::Snapshot* at = nullptr);

  RocksStore() = default;
  Status OpenDb(const std::string& path, const StoreOptions& options, bool read_only, rocksdb::Env* env);
  // After a failed write (or a failed background job) RocksDB refuses
  // further writes; the next write reopens the database (and fails with the
  // reopen's status while the fault lasts). Called by every write operation
  // before it takes db_mu_.
  Status PrepareWrite();
  // Closes and reopens the database; falls back to a read-only instance, or
  // none, when the writable open fails. Caller holds resume_mu_, not db_mu_.
  Status ReopenLocked();
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
  Status LoadOrCreateMeta(const StoreOptions& options);
  Status WarmChunkSizes();
  Status CheckWritable(std::string_view what) const;
  Result<std::optional<SnapshotRecordData>> ReadSnapshotRecord(int64_t step);
  Result<std::vector<int64_t>> ListSteps();
  // OK when snapshot `step` is committed; NotFound otherwise.
  Status CheckStored(int64_t step);
  // Deletes the snapshots `steps` (and their tensor records) in one atomic
  // batch; collects the chunk refs of their records into *released if given.
  Status DeleteSteps(const std::vector<int64_t>& steps, std::vector<ChunkRef>* released);
  // The hashes every committed tensor record references.
  Status CollectLiveChunks(std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher>* live);
  // Deletes the unpinned `candidates` (sizes[i] = encoded bytes of candidates[i])
  // and adds them to `report`.
  Result<GcReport> EraseChunks(std::vector<ChunkHash> candidates, const std::vector<uint64_t>& sizes,
                               GcReport report);
  Result<GcReport> CollectGarbageLocked(const ProgressFn& progress);
  // full_gc: scan every chunk afterwards; otherwise only those the deleted
  // snapshots referenced (cheap enough to run after every commit). Never
  // deletes `committed` (the snapshot whose commit runs the prune).
  Result<PruneReport> PruneLocked(const RetentionPolicy& policy, bool full_gc,
                                  std::optional<int64_t> committed = std::nullopt);
  // With retention on (keep_last > 0): InvalidArgument when `step` is below
  // the latest stored step (see RetentionPolicy). Caller holds commit_mu_.
  Status CheckRetentionKeeps(int64_t step);
  // Decodes the value of chunk `hash` (raw_bytes long) into dst and checks
  // its hash; a delta chunk's base is decoded first (recursively), and must
  // be one level shallower. The base's value is `base_value` when given
  // (prefetched by the caller), else read here.
  Status ReadChunkInto(const ChunkRef& ref, std::string_view value, uint8_t* dst,
                       std::optional<std::string_view> base_value = std::nullopt);
  // One chunk of a ReadTensors call.
  struct ChunkRead {
    const ChunkRef* ref;
    uint8_t* dst;
    size_t read;   // index into the reads
    size_t index;  // chunk index within its tensor
  };
  // Reads and decodes chunks[begin, end) with two MultiGets (values, then
  // the bases of the deltas among them); the first error per read goes to
  // errors[read], guarded by errors_mu.
  void ReadChunkBatch(const std::vector<ChunkRead>& chunks, size_t begin, size_t end,
                      const std::vector<TensorRead>& reads, std::vector<Status>* errors, std::mutex* errors_mu);
  // Adds to `live` every chunk a delta chain of a live chunk needs.
  Status AddDeltaBases(std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher>* live);
  // hash -> base hash for every delta chunk (chunk_deps CF).
  Status ReadChunkDeps(std::unordered_map<ChunkHash, ChunkHash, ChunkHashHasher>* deps);

  std::string path_;
  bool read_only_ = false;
  size_t chunk_bytes_ = 0;
  int zstd_level_ = 1;
  bool compress_ = true;
  bool sync_ = true;
  int threads_ = 1;
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

  std::unique_ptr<boost::asio::thread_pool> pool_;
  ChunkRegistry registry_;
  // Serializes commits, deletes and garbage collection.
  std::mutex commit_mu_;
  std::mutex resume_mu_;  // serializes recoveries
  std::atomic<bool> needs_resume_{false};
  // RocksDB's count of background errors (failed flushes, compactions) seen
  // so far by this instance of the database; reset on reopen.
  std::atomic<uint64_t> background_errors_seen_{0};
  // Bumped by every reopen.
  std::atomic<uint64_t> generation_{0};
  Status recovery_error_;  // why db_ is null; guarded by db_mu_
  StoreOptions options_;   // as opened; for reopening after a failure
};

}  // namespace trainsnap::internal
