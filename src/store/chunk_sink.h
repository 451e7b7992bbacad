// ChunkSink: the narrow interface between a snapshot writer and its store
// (look up, put, commit). The writer sees nothing else of the store; the
// store owns the delta-base policy (which chunk may be a delta against which
// base) and publishes a commit's bases itself.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/thread_pool.hpp>

#include "store/chunk_registry.h"
#include "store/delta_base_cache.h"
#include "store/pack_entry.h"
#include "store/records.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

// Everything one commit writes (see ChunkSink::CommitSnapshot).
struct SnapshotCommit {
  SnapshotInfo info;
  // In key order. Owned by the writer, which keeps them for a retry after a
  // failed commit: pointers, because a copy cost two allocations per record
  // on every commit (to scale linearly with the tensor count).
  std::vector<const TensorRecord*> records;
  // Snapshot format 2: the record groups the writer wrote; `records` are
  // then not written one by one.
  std::optional<std::vector<RecordGroupRef>> groups;
  std::string manifest;
  // SetSharedManifest's bytes: inline, or the chunk the writer wrote or
  // found (then pinned, and listed in `chunks` when new).
  SharedManifestRef shared;
  bool replace_existing = false;
  // The chunks the writer appended to the packs: indexed by this commit.
  std::vector<NewChunk> chunks;
  // Delta bases of the snapshot's tensors, for the next captures: the store
  // makes them current, moving them out, once the commit succeeded (and
  // leaves them to the writer otherwise). Not null.
  std::vector<std::pair<DeltaBaseKey, std::shared_ptr<DeltaBase>>>* delta_bases = nullptr;
};

class ChunkSink {
 public:
  // Fixed for the sink's life.
  struct Settings {
    size_t chunk_bytes = 0;
    bool compress = true;
    int zstd_level = 1;
  };

  virtual ~ChunkSink() = default;

  virtual const Settings& sink_settings() const = 0;
  // Runs the writer's per-chunk work.
  virtual boost::asio::thread_pool& pool() = 0;
  // Pins (garbage collection skips pinned hashes) and known stored sizes.
  virtual ChunkRegistry& registry() = 0;

  // --- delta-base policy (StoreOptions::keyframe_interval, delta_reference)
  // Whether this store writes delta chunks at all.
  virtual bool DeltasEnabled() const = 0;
  // The current bases of `key` (committed by this process), if any.
  virtual std::shared_ptr<const DeltaBase> DeltaBasesOf(const DeltaBaseKey& key) = 0;
  // The most raw bytes of one tensor the bases keep.
  virtual size_t DeltaBaseBudget() const = 0;
  // Whether chunk `index` of a tensor may be encoded against bases' chunk
  // `index` (the keyframe interval and reference allow it).
  virtual bool MayDelta(const DeltaBase& bases, size_t index) const = 0;
  // With DeltaReference::kKeyframe a chunk written as a delta keeps its
  // base as the next version's base; with kParent the new chunk becomes it.
  virtual bool DeltaKeepsKeyframe() const = 0;

  // --- look up, put, commit ------------------------------------------------------
  // Whether a committed chunk `hash` exists; its stored size when it does.
  virtual Result<std::optional<uint64_t>> LookupChunk(const ChunkHash& hash) = 0;
  // Appends an encoded chunk; referenced by nothing until a commit lists it.
  virtual Result<PackEntry> PutChunk(const ChunkHash& hash, const std::string& encoded) = 0;
  // The committed record of (param_id, role) at `step`.
  virtual Result<TensorRecord> CommittedTensor(int64_t step, uint64_t param_id, std::string_view role) = 0;
  // Commits atomically; on success *metadata_bytes = the keys and values
  // written for the snapshot's records (snapshot record, tensor records).
  virtual Result<SnapshotInfo> CommitSnapshot(SnapshotCommit commit, uint64_t* metadata_bytes) = 0;
  // Pack numbers a writer begun now may use are at least the returned one;
  // compaction leaves them alone until the floor is released.
  virtual uint32_t AcquireWriterFloor() = 0;
  virtual void ReleaseWriterFloor(uint32_t floor) = 0;
};

}  // namespace trainsnap::internal
