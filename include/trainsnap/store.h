// Store: one RocksDB database holding every snapshot of a training run as
// deduplicated, compressed, hash-verified chunks. Works on bytes, dtypes and
// shapes only; the LibTorch side lives in checkpointer.h.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainsnap/dtype.h"
#include "trainsnap/export.h"
#include "trainsnap/status.h"

namespace trainsnap {

// Which snapshots to keep. A snapshot is kept if it is among the `keep_last`
// highest steps, or its step is a multiple of `keep_every`; a commit's prune
// never deletes the snapshot that commit wrote. keep_last = 0 keeps all.
// Steps, not commit order: with keep_last > 0, committing a step below the
// latest stored step is refused (InvalidArgument, nothing written), since
// retention would delete it first and Latest() would not return it. A run
// resumed from an older step calls Rollback(step) before capturing again.
struct TRAINSNAP_EXPORT RetentionPolicy {
  int64_t keep_last = 0;   // 0 = no retention: keep every snapshot
  int64_t keep_every = 0;  // 0 = no periodic keep
};


// The base of an XOR-delta chunk.
enum class DeltaReference {
  // The chunk's last keyframe: every delta is one level deep, so restoring
  // any snapshot decodes at most two chunk values per chunk.
  kKeyframe,
  // The chunk's previous version: smaller deltas when values drift, but a
  // chain up to keyframe_interval - 1 deep, each level decoded on restore.
  kParent,
};

struct TRAINSNAP_EXPORT StoreOptions {
  // Zstd level for new chunks (1..19). 0 = 1: higher levels gain little on
  // shuffled floats for much more CPU (bench/README.md, codec).
  // Not fixed: may change between opens.
  int zstd_level = 1;
  // Compress new chunks with Zstd and write XOR deltas. false stores every
  // new chunk raw (restores read it straight into the tensor): less encoder
  // CPU and faster restores for more bytes, meant for a snapshot every step
  // on few cores (the figures: bench/README.md, "Latest figures").
  // Not fixed: may change between opens; chunks written either way read back.
  bool compress = true;
  // Chunk size in bytes, fixed when the store is created. 0 = use the stored
  // value (1 MiB for a new store). A non-zero value that differs from the
  // store's is an InvalidArgument error.
  size_t chunk_bytes = 0;
  // fsync the pack files and the WAL on every snapshot commit (and in
  // garbage collection). Turn off only for benchmarks and tests.
  bool sync = true;
  // Worker threads for encoding and decoding chunks. 0 = hardware threads.
  int threads = 0;
  // Nice value (0..19) added to trainsnap's own snapshot threads: the
  // store's workers and a Checkpointer's pipeline on this store (per thread;
  // no other thread of the process changes). Training then keeps its cores;
  // encoding takes the CPU the loop leaves idle (bench/README.md, "Worker
  // priority"). 0 = leave the priorities alone. Writable stores only.
  int worker_nice = 19;
  // Also run RocksDB's flush and compaction threads at the lowest CPU
  // priority (nice 19). Process-wide: those threads belong to RocksDB's
  // default Env, shared by every RocksDB database in the process, and stay
  // lowered after the store closes. Off by default; writable stores only.
  bool lower_rocksdb_priority = false;
  // Upper bound on host staging memory for snapshots in flight, in bytes,
  // used by Checkpointers on this store whose own max_staging_bytes is 0.
  // 0 = 1 GiB. Capture waits (back-pressure) rather than exceeding it.
  size_t max_staging_bytes = 0;
  // Create the store if `path` does not exist. Open fails with NotFound otherwise.
  bool create_if_missing = true;
  // Applied (Prune) after every successful commit when retention.keep_last > 0.
  // Only the chunks of the pruned snapshots are collected then (no full scan);
  // their disk space is given back (as CollectGarbage does) once they add up
  // to a quarter of the live chunk bytes.
  // A failure to prune does not fail the commit; the next commit retries.
  RetentionPolicy retention;
  // XOR deltas (docs/format.md, "Delta chunks"): a changed chunk may be
  // stored as its XOR with a base, the same chunk of an earlier snapshot of
  // the tensor, when a sample says that is at least 20 % smaller (a delta
  // costs its restore a second decode). A keyframe (no delta)
  // comes at least every keyframe_interval snapshots of a tensor. 0 or 1 =
  // never write deltas. At most 255.
  int keyframe_interval = 16;
  // Which earlier version a delta is taken against (see DeltaReference).
  DeltaReference delta_reference = DeltaReference::kKeyframe;
  // Host memory for the raw bytes of each tensor's previous version (the
  // delta bases). 0 = 1 GiB. Tensors beyond it are written without deltas.
  size_t delta_base_cache_bytes = 0;
  // Committed work that may live only in RocksDB's write-ahead log, in bytes
  // of WAL: past it the store flushes to table files. A damaged WAL
  // loses at most this much; reopening replays at most this much. 0 = 16 MiB.
  uint64_t max_unflushed_bytes = 0;
  // The same bound in commits: after this many, a background flush starts.
  // 0 = 16.
  int max_unflushed_commits = 0;
  // Disk space, in bytes, held in a reserve file (SPACE_RESERVE in the store
  // directory) so that Delete, Rollback, Prune and CollectGarbage work on a
  // full disk: released when one of them finds less free space than this,
  // re-created once twice this much is free. Must be 0 (no reserve) or at
  // least twice max_unflushed_bytes: giving space back on a full disk
  // flushes what is unflushed, up to two memtables of that size. Leave room
  // above that for the commit that crossed the bound and the chunks of a
  // capture that failed for lack of space (up to one snapshot's new bytes).
  uint64_t reserve_bytes = uint64_t{40} << 20;
};

// 128-bit XXH3 hash of a chunk's raw bytes: the chunk's address.
struct TRAINSNAP_EXPORT ChunkHash {
  std::array<uint8_t, 16> bytes{};
  std::string Hex() const;  // 32 lowercase hex digits
  bool operator==(const ChunkHash& o) const { return bytes == o.bytes; }
  bool operator<(const ChunkHash& o) const { return bytes < o.bytes; }
};

struct TRAINSNAP_EXPORT ChunkRef {
  ChunkHash hash;
  uint64_t raw_bytes = 0;     // length of the chunk's raw (decoded) bytes
  uint64_t stored_bytes = 0;  // length of the encoded value (header + payload)
};

// A tensor as stored in one snapshot, identified by (param_id, role).
struct TRAINSNAP_EXPORT TensorRecord {
  uint64_t param_id = 0;
  std::string role;  // "param", "grad", "exp_avg", "buffer", ...
  DType dtype = DType::kUnknown;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;  // logical size = numel * DTypeSize(dtype)
  std::vector<ChunkRef> chunks;
};

// The bytes of one tensor to write: a view, not owned; must stay valid and
// unchanged until AddTensor returns. Must be contiguous, in native byte order.
struct TRAINSNAP_EXPORT TensorView {
  uint64_t param_id = 0;
  std::string role;
  DType dtype = DType::kUnknown;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t size_bytes = 0;  // must equal numel(shape) * DTypeSize(dtype)
  std::string name;       // for error messages; empty = "tensor param_id N role R"
};

// One destination of Store::ReadTensors.
struct TRAINSNAP_EXPORT TensorRead {
  const TensorRecord* record = nullptr;  // from this store's Tensors()/Tensor()
  void* dst = nullptr;                   // record->bytes writable bytes
  size_t dst_bytes = 0;                  // must equal record->bytes
  std::string name;  // for error messages; empty = "param_id N role R"
};

struct TRAINSNAP_EXPORT SnapshotInfo {
  int64_t step = 0;
  int64_t created_unix_ms = 0;
  uint64_t tensors = 0;
  uint64_t logical_bytes = 0;  // sum of tensor sizes
  uint64_t chunks = 0;         // chunk references (with repeats)
  uint64_t stored_bytes = 0;   // encoded bytes of all referenced chunks
  uint64_t new_chunks = 0;     // chunks this snapshot wrote to the store first
  uint64_t new_bytes = 0;      // encoded bytes of those chunks
  // Bytes of application manifest the snapshot record holds (SetManifest's,
  // plus SetSharedManifest's when under 4 KiB): what each snapshot repeats.
  uint64_t manifest_bytes = 0;
};

struct TRAINSNAP_EXPORT GcReport {
  uint64_t chunks_scanned = 0;
  uint64_t chunks_deleted = 0;
  uint64_t bytes_deleted = 0;  // encoded bytes of the deleted chunks
  uint64_t chunks_live = 0;
  // Pack compaction (docs/format.md, "Pack files"): pack files deleted, the
  // live chunk bytes copied out of them (the write amplification), and the
  // disk bytes given back (deleted pack files minus the copies).
  uint64_t packs_removed = 0;
  uint64_t pack_bytes_rewritten = 0;
  uint64_t pack_bytes_freed = 0;
  // What the collection could not do (docs/reliability.md, "Damaged
  // packs"): pack files it left as they are, one line each: those the chunk
  // index names that are missing or shorter than it says
  // ("packs/pack-00000001.pack is missing"), and those whose chunks could not
  // be read to compact them; and the snapshots that need chunks lost with
  // them (or a chunk that fails its hash), ascending. Empty when none.
  std::vector<std::string> damaged_packs;
  std::vector<int64_t> damaged_steps;
};

// Every chunk counted is one CollectGarbage would delete; bytes are encoded
// bytes, as in GcReport::bytes_deleted.
struct TRAINSNAP_EXPORT GcPlan {
  // Chunks the deleted snapshots need (reference, or use as a delta base)
  // and the remaining ones do not: what the deletion frees.
  uint64_t chunks_freed = 0;
  uint64_t bytes_freed = 0;
  // Chunks no snapshot needs already (left by an earlier deletion).
  uint64_t chunks_unreferenced = 0;
  uint64_t bytes_unreferenced = 0;
};

struct TRAINSNAP_EXPORT PruneReport {
  std::vector<int64_t> deleted_steps;  // ascending
  GcReport gc;                         // the garbage collection that followed
};

struct TRAINSNAP_EXPORT VerifyProblem {
  int64_t step = 0;
  uint64_t param_id = 0;
  std::string role;         // empty when the manifest itself is bad
  int64_t chunk_index = -1; // -1 when the problem is not a single chunk
  ChunkHash hash;
  // Corruption (damaged bytes), NotFound (a referenced chunk missing) or
  // IOError (a file that cannot be read: permission denied, a failing disk),
  // with details.
  Status status;
  // A problem of the whole store (a damaged table or pack file, a count that
  // disagrees, lost commits, leftover records) names no snapshot: `store` is
  // true and `step` is 0; `file` names the damaged file when there is one.
  bool store = false;
  std::string file;
};

struct TRAINSNAP_EXPORT VerifyReport {
  uint64_t snapshots = 0;
  uint64_t tensors = 0;
  uint64_t chunks = 0;  // chunk references checked
  uint64_t bytes = 0;   // raw bytes re-hashed
  std::vector<VerifyProblem> problems;
  // Read-only stores: snapshots of the store's view that the writer deleted
  // while Verify read them (not problems), ascending.
  std::vector<int64_t> deleted_meanwhile;
  bool ok() const { return problems.empty(); }
};

// Committed snapshots the database no longer holds: its write-ahead log was
// damaged, cut or deleted after they committed (docs/reliability.md, "Lost
// commits"). Counts are of write transactions (commits and deletes).
struct TRAINSNAP_EXPORT LostCommits {
  uint64_t recorded = 0;                   // transactions the store's commit log recorded
  uint64_t found = 0;                      // transactions the database holds
  std::optional<int64_t> newest_recorded;  // newest step after the last recorded one; none if empty
  std::optional<int64_t> newest_found;     // newest step the database holds; none if empty
};

// What Store::Repair removed.
struct TRAINSNAP_EXPORT RepairReport {
  std::vector<int64_t> steps;      // steps whose leftover tensor records were deleted, ascending
  uint64_t tensor_records = 0;     // tensor records deleted
};

// Whole-store figures for `trainsnap stats`.
struct TRAINSNAP_EXPORT StoreStats {
  uint64_t snapshots = 0;
  uint64_t chunks = 0;                // distinct chunks stored
  uint64_t chunk_stored_bytes = 0;    // their encoded bytes
  uint64_t chunk_raw_bytes = 0;       // their raw bytes
  uint64_t logical_bytes = 0;         // sum of every snapshot's logical bytes
  uint64_t referenced_bytes = 0;      // sum of every snapshot's stored (referenced) bytes
  uint64_t collectable_chunks = 0;    // chunks no snapshot references (GC would delete)
  uint64_t collectable_bytes = 0;
  uint64_t sst_bytes = 0;             // RocksDB table files
  uint64_t pack_bytes = 0;            // pack files (chunk bytes; docs/format.md "Pack files")
  uint64_t packs = 0;                 // pack files
  // Pack bytes no chunk index entry references: deleted chunks and chunks
  // of captures that never committed. Garbage collection compacts the
  // packs where they exceed a quarter of the bytes.
  uint64_t pack_garbage_bytes = 0;
  uint64_t wal_bytes = 0;             // RocksDB write-ahead log files
  uint64_t reserve_bytes = 0;         // the reserve file (StoreOptions::reserve_bytes)
  uint64_t other_bytes = 0;           // MANIFEST, OPTIONS and other files
  uint64_t disk_bytes = 0;            // every file in the store directory and packs/
};

// Called with (done, total) units of work during long operations. May be empty.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

struct TRAINSNAP_EXPORT SnapshotOptions {
  // Overwrite an existing snapshot of the same step instead of failing with
  // AlreadyExists.
  bool replace_existing = false;
};

// Builds one snapshot. Obtained from Store::BeginSnapshot. AddTensor is
// thread-safe (encode tensors in parallel); Commit must be called once, after
// every AddTensor returned. Destroying an uncommitted writer abandons the
// snapshot: nothing becomes visible; chunks it wrote are left for GC.
// Must not outlive its Store. After an AddTensor failed (other than by
// validation), Commit returns Aborted: the snapshot would lack a tensor.
class TRAINSNAP_EXPORT SnapshotWriter {
 public:
  virtual ~SnapshotWriter() = default;
  virtual int64_t step() const = 0;
  // Chunks, hashes, dedups, compresses and writes the tensor's new chunks.
  // (param_id, role) must be unique within the snapshot.
  virtual Status AddTensor(const TensorView& tensor) = 0;
  // Adds (param_id, role) by reusing its record from the committed snapshot
  // `from_step` (its chunk list, dtype and shape): nothing is read, hashed
  // or written, and the chunks are pinned against GC until Commit.
  // NotFound when that snapshot has no such tensor. Thread-safe like AddTensor.
  virtual Status AddUnchangedTensor(uint64_t param_id, const std::string& role, int64_t from_step) = 0;
  // The same with a record already read from this store (Store::Tensor):
  // reuses its chunk list, dtype and shape, whether or not the snapshot it
  // was read from still exists. NotFound when one of its chunks is no longer
  // stored (collected since). Thread-safe like AddTensor.
  virtual Status AddTensorRecord(const TensorRecord& record) = 0;
  // Opaque application bytes (the checkpointer's manifest). Defaults to empty.
  virtual void SetManifest(std::string bytes) = 0;
  // Opaque application bytes that many snapshots share (the checkpointer's
  // layout: names, shapes, dtypes). From 4 KiB on they are stored once, as a
  // content-addressed chunk in the pack files that every snapshot setting
  // equal bytes references (its record holds the chunk's 16-byte hash) and
  // that lives while one of them does; smaller ones are stored in the
  // snapshot record. At most 256 MiB (else Commit fails with
  // InvalidArgument). Defaults to empty.
  virtual void SetSharedManifest(std::string bytes) = 0;
  // Commits every tensor record and the manifest in one transaction with a
  // synced WAL (StoreOptions::sync). On error nothing of the snapshot is visible.
  virtual Result<SnapshotInfo> Commit() = 0;
};

// Thread-safe. A writable Store holds RocksDB's lock: one writer process per
// path. Read-only stores see the snapshots committed when they were opened
// or last refreshed.
class TRAINSNAP_EXPORT Store {
 public:
  virtual ~Store() = default;

  // Opens (or creates) a store for writing. Creates one only where `path`
  // does not exist or is an empty directory; anything else must be a
  // trainsnap store of a known format version, or the open fails without
  // changing a file: NotFound (not a store), Corruption (a damaged store,
  // e.g. its CURRENT file missing), NotSupported (another RocksDB database,
  // an unknown format version). Busy only if another process holds it;
  // IOError naming the path when permission is denied.
  static Result<std::unique_ptr<Store>> Open(const std::string& path, const StoreOptions& options = {});
  // Opens an existing store for reading, also while a writer holds it
  // (a RocksDB read-only instance; writes return NotSupported).
  static Result<std::unique_ptr<Store>> OpenReadOnly(const std::string& path);

  virtual const std::string& path() const = 0;
  virtual bool read_only() const = 0;
  virtual size_t chunk_bytes() const = 0;
  // The options this store was opened with (defaults for a read-only store).
  virtual const StoreOptions& options() const = 0;
  // Read-only stores: catch up with snapshots the writer committed since.
  virtual Status Refresh() = 0;
  // What the open found and put right on its own, one line each (a store
  // creation that a crash had interrupted, done again); empty when nothing.
  virtual std::vector<std::string> open_notes() const { return {}; }

  // Committed snapshots that were lost since the store's commit log recorded
  // them (a damaged or deleted write-ahead log), found at open or by
  // Verify; none when every recorded commit is in the database or the loss
  // was acknowledged. Garbage collection (and Prune) refuse to run while a
  // loss is unacknowledged.
  virtual std::optional<LostCommits> lost_commits() = 0;
  // Accepts the loss reported by lost_commits(): the commit log is reset to
  // what the database holds, and garbage collection runs again. Writable
  // stores only (NotSupported otherwise). OK when there is no loss.
  virtual Status AcknowledgeLostCommits() = 0;

  // --- snapshots ---------------------------------------------------------
  // Both check the snapshot count committed with every commit and delete,
  // read at one RocksDB snapshot: a scan that finds another number of
  // snapshots is Corruption, never a shorter list.
  virtual Result<std::vector<SnapshotInfo>> List() = 0;  // ascending step
  virtual Result<std::optional<int64_t>> Latest() = 0;
  virtual Result<SnapshotInfo> Info(int64_t step) = 0;
  // Whether a snapshot is stored at `step`, without reading or checking its
  // record (Info does both): the cheap test a capture makes of its previous
  // snapshot. Errors only when the store cannot be read.
  virtual Result<bool> Contains(int64_t step) = 0;
  virtual Result<std::string> Manifest(int64_t step) = 0;
  // The bytes SetSharedManifest gave the snapshot (empty if none), hash
  // checked: Corruption naming `shared manifest <hex>` when its chunk is
  // missing or damaged; NotFound when no snapshot is at `step`.
  virtual Result<std::string> SharedManifest(int64_t step) = 0;
  virtual Result<std::vector<TensorRecord>> Tensors(int64_t step) = 0;  // by (param_id, role)
  virtual Result<TensorRecord> Tensor(int64_t step, uint64_t param_id, std::string_view role) = 0;
  // Decodes `record` into dst (dst_bytes must equal record.bytes), verifying
  // every chunk's hash. Corruption names the chunk (also for a referenced
  // chunk missing from the store). dst is unspecified on error.
  virtual Status ReadTensor(const TensorRecord& record, void* dst, size_t dst_bytes) = 0;
  // Reads many tensors at once (a restore): the chunks of all of them are
  // fetched in batches with RocksDB MultiGet and decoded in parallel on the
  // store's worker threads. Each read is checked like ReadTensor; the error
  // returned is that of the first failing read in `reads` order.
  // Destinations are unspecified on error.
  virtual Status ReadTensors(const std::vector<TensorRead>& reads) = 0;

  // --- writing -----------------------------------------------------------
  virtual Result<std::unique_ptr<SnapshotWriter>> BeginSnapshot(int64_t step,
                                                               const SnapshotOptions& options = {}) = 0;
  virtual Status Delete(int64_t step) = 0;    // NotFound if absent; chunks stay until GC
  // Deletes every snapshot with a later step; NotFound if `step` itself is not stored.
  virtual Status Rollback(int64_t step) = 0;
  // Deletes every chunk that no committed snapshot (and no writer in flight)
  // references, then gives their space back to the file system (flush, and
  // compaction of the chunk index; live values are rewritten once deleted
  // ones exceed a quarter of them). Safe at any crash point. Delete,
  // Rollback, Prune and CollectGarbage also work on a full disk, using the
  // space of StoreOptions::reserve_bytes.
  virtual Result<GcReport> CollectGarbage(const ProgressFn& progress = {}) = 0;
  // Re-reads and re-hashes every chunk of `step` (or of every snapshot).
  // Problems are reported in the VerifyReport; the Status is for failures to run.
  // A referenced chunk that is missing is a NotFound problem; a damaged one,
  // Corruption. NotFound status when `step` is given and not stored.
  // Without `step` it also checks the whole store: the block checksums of
  // every table file (one problem per damaged file), that every pack file the
  // chunk index names is there and long enough, every column family (meta, snapshots, tensors,
  // chunk_deps) against the stored snapshot count, leftover tensor records of
  // deleted steps, and lost commits.
  virtual Result<VerifyReport> Verify(std::optional<int64_t> step = std::nullopt,
                                      const ProgressFn& progress = {}) = 0;
  // Deletes the snapshots `policy` does not keep, then collects garbage
  // (and gives the space back, as CollectGarbage).
  virtual Result<PruneReport> Prune(const RetentionPolicy& policy) = 0;
  virtual Result<StoreStats> Stats(const ProgressFn& progress = {}) = 0;
  // Deletes leftover tensor records of steps that have no snapshot record
  // (what Verify reports as leftovers; garbage collection refuses to run
  // while there are any). Only when the snapshot records agree with the
  // stored count: Corruption otherwise, and nothing is deleted. One atomic
  // write; no committed snapshot loses anything.
  virtual Result<RepairReport> Repair() = 0;
  // What deleting the snapshots `steps`, then collecting garbage, would
  // free, by CollectGarbage's own rule (GcPlan). Changes nothing; works on
  // read-only stores. NotFound if a step is not stored; NotSupported for a
  // Store that cannot tell.
  virtual Result<GcPlan> PlanCollection(const std::vector<int64_t>& steps, const ProgressFn& progress = {}) {
    static_cast<void>(steps);
    static_cast<void>(progress);
    return Status::NotSupported("plan collection: not a store opened by Store::Open/OpenReadOnly");
  }
};

}  // namespace trainsnap
