// Catalog: what a store holds (docs/code-map.md, "The store's parts"): the
// meta record (format version, chunk size), the snapshot records, the tensor
// records (tensors CF, or record groups in the packs), the counts record
// written with every transaction, and the commit log that tells lost
// commits (docs/reliability.md, "Lost commits").
//
// Thread-safe. Every read runs under a view of the session that the caller
// holds (DbSession::AcquireView) and reads at the caller's RocksDB snapshot
// where it takes one. Writes (DeleteSteps, the counts and records of a
// commit, AcknowledgeLoss) must be serialized by the caller (the store's
// commit lock). Lock order: the session's locks, then lost_mu_ and
// tensor_cache_mu_ (leaves).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "common/mutex.h"
#include "store/chunk_sink.h"
#include "store/chunk_store.h"
#include "store/commit_log.h"
#include "store/db_session.h"
#include "store/records.h"
#include "trainsnap/store.h"

namespace trainsnap::proto {
class StoreMeta;
}

namespace trainsnap::internal {

// The store format version this build reads and writes (docs/format.md).
// 5: chunk bytes live in pack files and the chunks CF holds their index
// entries (PackEntry); versions 1..4 kept chunk values in RocksDB.
// 6: snapshot records may reference a shared manifest chunk
// (SnapshotWriter::SetSharedManifest), which the GC of version 5 builds
// would delete.
// 7: chunks may be plane-coded (ChunkCodec::kPlanes), which builds before
// it would report as corrupt. A version-6 store is read as it is and
// upgraded (its meta record rewritten) by the first writable open, before
// anything is written with the new codec. Older versions are not read: an
// open refuses them with NotSupported naming both versions.
inline constexpr uint32_t kMetaFormatVersion = 7;
inline constexpr uint32_t kMinReadableFormatVersion = 6;
// Version 3 added the counts record; every store this build reads has it.
inline constexpr uint32_t kCountsFormatVersion = 3;
inline constexpr char kMetaStoreKey[] = "store";
inline constexpr size_t kDefaultChunkBytes = size_t{1} << 20;
// Chunk sizes a store may be created with: at least the largest element
// (complex128), at most what one RocksDB value comfortably holds.
inline constexpr size_t kMinChunkBytes = 16;
inline constexpr size_t kMaxChunkBytes = size_t{1} << 30;

// The checks of a meta record against this build and the opener's options.
Status CheckMeta(const proto::StoreMeta& meta, const StoreOptions& options);
std::string DescribeLoss(const LostCommits& loss);

class Catalog {
 public:
  // `session` and `chunks` (record groups and shared manifests are chunks)
  // must outlive the catalog.
  Catalog(DbSession& session, ChunkStore& chunks) : session_(session), chunks_(chunks) {}

  // --- the meta record, the counts and the commit log -------------------------------
  // Reads the meta record; a writable store without one (a new store, or a
  // creation that stopped before it) writes it and an empty counts record.
  Status LoadOrCreateMeta(const StoreOptions& options);
  // A writable store of an older readable version: rewrites the meta record
  // at kMetaFormatVersion (one synced write) and sets upgraded_from(). The
  // open calls it last, once everything else succeeded (a failed open
  // leaves the store as it was) and before anything is written with the
  // new format. Read-only or current: nothing.
  Status UpgradeMeta();
  uint32_t format_version() const { return format_version_; }
  // The version the store had before this open upgraded it; 0 if it did not.
  uint32_t upgraded_from() const { return upgraded_from_; }
  size_t chunk_bytes() const { return chunk_bytes_; }
  // The counts record at `at`; none for a store of format version < 3,
  // which has none. Corruption when a version-3 store lacks it.
  Result<std::optional<StoreCountsData>> ReadCounts(const rocksdb::Snapshot* at);
  // Corruption unless a scan at `at` that found `found` snapshots, the newest
  // `newest`, agrees with the counts record read at the same snapshot.
  // `found` none: only the newest step is checked (Latest).
  Status CheckListed(const rocksdb::Snapshot* at, std::optional<uint64_t> found, std::optional<int64_t> newest);
  // Adds the counts record for `counts` to `batch`.
  Status PutCounts(rocksdb::WriteBatch* batch, const StoreCountsData& counts);
  // After a batch that wrote `counts` committed: records it in the commit log.
  Status NoteTransaction(const StoreCountsData& counts);
  // Compares the commit log (read before the database was opened) with the
  // database's counts and sets the lost commits; a writable store then
  // (re)writes the log (fdatasync'ed when `sync`), keeping an
  // unacknowledged loss in it.
  Status CheckCommitLog(const std::optional<CommitLogState>& log, bool sync);
  std::optional<LostCommits> lost_commits();
  // Refuses (Corruption) while lost commits are not acknowledged.
  Status CheckNoLostCommits(std::string_view what);
  // Accepts the loss: the commit log restarts from what the database holds.
  Status AcknowledgeLoss();

  // --- snapshots and their records --------------------------------------------------
  // The snapshot record of `step` as `ro` sees it; nullopt when there is none.
  Result<std::optional<SnapshotRecordData>> ReadSnapshotRecord(int64_t step,
                                                               const rocksdb::ReadOptions& ro = rocksdb::ReadOptions());
  // The stored steps at `at` (null = a snapshot of its own), ascending;
  // checked against the counts record unless `check_counts` is false.
  Result<std::vector<int64_t>> ListSteps(const rocksdb::Snapshot* at = nullptr, bool check_counts = true);
  // Store::List at `at` (null = a snapshot of its own), checked against the counts.
  Result<std::vector<SnapshotInfo>> ListInView(const rocksdb::Snapshot* at = nullptr);
  // Store's reads of the same names.
  Result<std::optional<int64_t>> Latest();
  Result<SnapshotInfo> Info(int64_t step);
  Result<bool> Contains(int64_t step);
  Result<std::string> Manifest(int64_t step);
  Result<std::string> SharedManifest(int64_t step);
  Result<std::vector<TensorRecord>> Tensors(int64_t step);
  // Store::Tensor: also Corruption when the record references a chunk the
  // chunk store knows is unusable (a capture must write the tensor again).
  Result<TensorRecord> Tensor(int64_t step, uint64_t param_id, std::string_view role);
  // The shared manifest bytes of a snapshot whose record is `data`.
  Result<std::string> ReadSharedManifest(const SnapshotRecordData& data, const rocksdb::ReadOptions& ro);
  // The tensor records of a snapshot whose record is `data`, at `ro`: from
  // its record groups (snapshot format 2) or the tensors CF (format 1).
  Result<std::vector<TensorRecord>> SnapshotTensors(const SnapshotRecordData& data, const rocksdb::ReadOptions& ro);
  // Reads, decodes (hash checked) and parses one record group at `ro`.
  Result<std::vector<TensorRecord>> ReadRecordGroup(const RecordGroupRef& group, const rocksdb::ReadOptions& ro);
  // Calls `visit` with the key and value of every tensor record of `step`
  // (tensors CF, snapshot format 1) at `ro`, in key order; stops at the
  // first error `visit` returns.
  using RecordVisitor = std::function<Status(std::string_view key, std::string_view value)>;
  Status ScanTensorRecords(int64_t step, const rocksdb::ReadOptions& ro, const RecordVisitor& visit);
  // OK when snapshot `step` is committed; NotFound otherwise.
  Status CheckStored(int64_t step);
  // Steps with tensor records but no snapshot record, and their record
  // counts, read at `at`.
  Status FindLeftovers(const rocksdb::Snapshot* at, std::map<int64_t, uint64_t>* leftovers);

  // --- writing ----------------------------------------------------------------------
  // Adds the snapshot of `commit` to *batch: its snapshot record, its tensor
  // records when it has no record groups (snapshot format 1), and the
  // counts record of the transaction (*counts, for NoteTransaction once it
  // committed). Replacing a stored step deletes its old tensor records in
  // the same batch; AlreadyExists without commit.replace_existing.
  // *info gets the manifest bytes, *record_bytes the keys and values written
  // for the snapshot's records.
  Status AddSnapshot(const SnapshotCommit& commit, rocksdb::WriteBatch* batch, SnapshotInfo* info,
                     StoreCountsData* counts, uint64_t* record_bytes);
  // Deletes the snapshots `steps` (and their tensor records) in one atomic
  // batch (WAL synced when `sync`); collects the chunk refs of their records
  // into *released if given, and the steps of `steps` that were stored into
  // *deleted (ascending) if given. Writes nothing when none is stored.
  Status DeleteSteps(const std::vector<int64_t>& steps, bool sync, std::vector<ChunkRef>* released,
                     std::vector<int64_t>* deleted = nullptr);
  // Store::Repair: deletes leftover tensor records of steps that have no
  // snapshot record, in one batch (WAL synced when `sync`), only when the
  // snapshot records agree with the counts (Corruption otherwise, nothing
  // deleted).
  Result<RepairReport> DeleteLeftovers(bool sync);
  // Drops the records cached by Tensor(): after every commit and delete and
  // on every swap of the session's instance. A look-up that read the
  // database before the reset does not fill the cache.
  void ResetTensorCache();

 private:
  rocksdb::DB* db() const { return session_.db(); }
  rocksdb::ColumnFamilyHandle* cf(ColumnFamily which) const { return session_.cf(which); }
  // Tensor() without the check against unusable chunks.
  Result<TensorRecord> CatalogTensor(int64_t step, uint64_t param_id, std::string_view role);

  DbSession& session_;
  ChunkStore& chunks_;
  uint32_t format_version_ = 0;  // of the meta record, as opened
  uint32_t upgraded_from_ = 0;
  size_t chunk_bytes_ = 0;
  // Writable stores: the commit log, written by serialized writers.
  std::unique_ptr<CommitLog> commit_log_;
  Mutex lost_mu_;
  std::optional<LostCommits> lost_ GUARDED_BY(lost_mu_);
  // The records of the last grouped snapshot Tensor() looked up: the
  // checkpointer looks up every unchanged tensor of one snapshot in a row,
  // and a grouped look-up would otherwise parse the snapshot record
  // (manifest included) and decode a group per call.
  Mutex tensor_cache_mu_;
  uint64_t tensor_cache_generation_ GUARDED_BY(tensor_cache_mu_) = 0;
  std::optional<int64_t> tensor_cache_step_ GUARDED_BY(tensor_cache_mu_);
  std::map<std::pair<uint64_t, std::string>, TensorRecord> tensor_cache_ GUARDED_BY(tensor_cache_mu_);
};

}  // namespace trainsnap::internal
