// SnapshotWriterImpl: builds one snapshot through a ChunkSink (its store; see
// SnapshotWriter in include/trainsnap/store.h). Must not outlive the sink.
#pragma once

#include <atomic>
#include <functional>
#include <memory_resource>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "store/chunk_registry.h"
#include "store/chunk_sink.h"
#include "store/delta_base_cache.h"
#include "store/pack_entry.h"
#include "store/records.h"
#include "store/record_key.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

// A chunk is written as a delta only when its estimate is at least this
// fraction below the plain encoding's. A restore decodes a delta chunk's
// base and then the delta (2-3x the CPU of a keyframe chunk, bench/README.md
// "Deltas that pay for their restore"), so a delta that saves a few percent
// (Adam's moments drift by about 10 % of themselves per step) costs more
// than it saves; and a chunk written plain becomes the next keyframe, so
// the deltas after it are smaller. Measured on trainsnap_bench (K = 8):
// bytes per snapshot +0.3 % (dense) and +0.1 % (bf16) at 0.2, the last
// snapshot's read 104 -> 62 ms (dense) and 78 -> 58 ms (bf16).
inline constexpr double kMinDeltaSaving = 0.2;

class SnapshotWriterImpl final : public SnapshotWriter {
 public:
  SnapshotWriterImpl(ChunkSink* store, int64_t step, SnapshotOptions options);
  // Unpins every chunk this writer referenced and releases its in-flight
  // chunks; an uncommitted snapshot leaves only unreferenced chunks behind.
  ~SnapshotWriterImpl() override;

  int64_t step() const override { return step_; }
  Status AddTensor(const TensorView& tensor) override;
  Status AddUnchangedTensor(uint64_t param_id, const std::string& role, int64_t from_step) override;
  Status AddTensorRecord(const TensorRecord& record) override;
  void SetManifest(std::string bytes) override;
  void SetSharedManifest(std::string bytes) override;
  Result<SnapshotInfo> Commit() override;

  // After a successful Commit: the bytes this snapshot's metadata added to
  // the store: its snapshot record's key and value, plus its tensors-CF
  // keys and values (fewer than kMinGroupedRecords tensors) or the encoded
  // record-group chunks it wrote first (groups equal to an earlier
  // snapshot's cost nothing here), plus its shared-manifest chunk when it
  // wrote it first. 0 before the commit.
  uint64_t metadata_bytes() const { return metadata_bytes_; }

 private:
  // Cuts `records` (in key order) into groups, writes each group chunk that
  // the store does not hold (pinned like tensor chunks) and returns the
  // snapshot record's references. Called without mu_ held.
  Result<std::vector<RecordGroupRef>> WriteRecordGroups(const std::vector<const TensorRecord*>& records) EXCLUDES(mu_);
  // Hashes, dedups and (when new) encodes and writes chunk `index` of a
  // tensor; `bases` (may be null) holds the tensor's delta bases. Sets
  // *depth to the chunk's delta chain depth (kUnknownDeltaDepth when this
  // process does not know it) and *delta to whether it was written as a
  // delta against bases' chunk `index`.
  // `metadata`: a record-group or shared-manifest chunk, counted in metadata_new_bytes_
  // instead of new_chunks_ / new_bytes_.
  Status AddChunk(const uint8_t* data, size_t size, DType dtype, const DeltaBase* bases, size_t index,
                  ChunkRef* ref, uint8_t* depth, bool* delta, bool metadata = false);
  // Reserves (param_id, role), pins every chunk of `record` and checks it
  // is stored, then adds the record; `fail` adds the caller's context.
  Status AddRecord(TensorRecord record, const std::function<Status(Status)>& fail);
  // Notes the reference this writer took on an in-flight chunk (released by
  // the destructor) and pins the chunk's delta base: the writer may index it
  // after its appender is gone.
  Status AdoptInFlight(const InFlightChunk& chunk);
  // Pins `hash` for this writer; whether the store holds it.
  Result<bool> PinExisting(const ChunkHash& hash);

  ChunkSink* store_;
  const int64_t step_;
  const SnapshotOptions options_;
  // Compaction leaves packs from this number on alone while the writer
  // lives: its chunks are in them, unindexed until its commit.
  const uint32_t pack_floor_;

  Mutex mu_;
  // The nodes of the two tables below, freed all at once with the writer:
  // freed one by one, their free() and glibc's merging of the freed chunks
  // grew faster than the count, to a twentieth of a 50,000-parameter
  // commit (to scale linearly with the tensor count). A node erased (a failed AddTensor)
  // keeps its bytes until then. Declared before the tables: destroyed
  // after them. Used through the tables only, under mu_.
  std::pmr::monotonic_buffer_resource arena_;
  // Hashed, and put in key order once, by Commit: at 150,000 tensors an
  // ordered map's inserts grew faster than the count (to scale linearly
  // with the tensor count).
  std::pmr::unordered_map<RecordKey, TensorRecord, RecordKeyHash> records_ GUARDED_BY(mu_){&arena_};
  // Every chunk this writer pinned: its stored bytes (0 until known) and
  // whether this writer's commit indexes it (its entry is then in
  // new_chunk_entries_). One table, not two: a node per chunk fewer to
  // allocate and free (to scale linearly with the tensor count).
  struct SeenChunk {
    uint64_t stored_bytes = 0;
    bool indexed = false;
  };
  std::pmr::unordered_map<ChunkHash, SeenChunk, ChunkHashHasher> seen_ GUARDED_BY(mu_){&arena_};
  std::vector<NewChunk> new_chunk_entries_ GUARDED_BY(mu_);  // their pack places
  std::vector<ChunkHash> in_flight_held_ GUARDED_BY(mu_);  // references on in-flight chunks (ChunkRegistry)
  // Published on commit.
  std::vector<std::pair<DeltaBaseKey, std::shared_ptr<DeltaBase>>> new_bases_ GUARDED_BY(mu_);
  std::string manifest_ GUARDED_BY(mu_);
  std::string shared_manifest_ GUARDED_BY(mu_);
  uint64_t new_chunks_ GUARDED_BY(mu_) = 0;
  uint64_t new_bytes_ GUARDED_BY(mu_) = 0;
  // Record-group and shared-manifest chunks written first by this writer.
  uint64_t metadata_new_bytes_ GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> metadata_bytes_{0};
  bool committing_ GUARDED_BY(mu_) = false;  // Commit is writing record groups: no more tensors
  int adding_ GUARDED_BY(mu_) = 0;           // AddTensor/AddTensorRecord calls between reserve and record
  bool committed_ GUARDED_BY(mu_) = false;
  bool failed_ GUARDED_BY(mu_) = false;
  Status first_error_ GUARDED_BY(mu_);
};

}  // namespace trainsnap::internal
