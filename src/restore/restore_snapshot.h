// A whole restore, in two phases. Prepare: manifest and format version,
// contract, frozen base, devices, composition, decode (hash-verified), the
// plan, and the extras' LoadState (undone if the restore does not go on).
// Apply: the copy into the live objects, which cannot fail for data
// reasons. Between the two, a caller may still decide against the restore
// (RestoreOptions::discard_later deletes the later snapshots there; several
// processes agree there that every one of them prepared).
#pragma once

#include <google/protobuf/arena.h>

#include <cstdint>
#include <memory>
#include <string>

#include "manifest.pb.h"
#include "restore/apply.h"
#include "restore/decode.h"
#include "restore/optimizer_parts.h"
#include "torch/base_identity.h"
#include "torch/contract_cache.h"
#include "trainsnap/checkpointer.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

// Where a restore reads the snapshot from. By default: the manifest of
// `step` in the restoring store, its tensors from that store and from
// RestoreOptions::sources (the external ones).
struct SnapshotInput {
  // A manifest the caller read or composed (a multi-process restore); not
  // owned, must outlive PrepareRestore. Null: read from the store.
  const proto::TrainingManifest* manifest = nullptr;
  // Decodes the wanted tensors; not owned. Null: the store and
  // RestoreOptions::sources.
  TensorReader* reader = nullptr;
  // A snapshot several processes captured with sharded optimizers, restored
  // into other shards: each optimizer of the manifest is composed from every
  // part's for the target (ComposeOptimizer; its state tensors become
  // external, read from their parts' sources). Not owned; null: the
  // manifest's own optimizers.
  const std::vector<OptimizerPart>* optimizer_parts = nullptr;
};

// The outcome of the first phase: everything decoded and planned, the
// extras loaded. Exactly one of Apply or Abandon takes effect; destroying it
// without either abandons it.
class PreparedRestore {
 public:
  PreparedRestore(ContractCache::Lease lease, RestorePlan plan);
  ~PreparedRestore();
  PreparedRestore(const PreparedRestore&) = delete;
  PreparedRestore& operator=(const PreparedRestore&) = delete;

  // Writes every prepared value into the live objects. Cannot fail for data
  // reasons: Aborted only when LibTorch throws (an allocation of a replaced
  // gradient). Nothing after the first call.
  Status Apply();
  // The restore does not go on: the extras get their previous state back.
  // Aborted naming each extra that refused it (ExtrasUndo::Undo); every live
  // tensor is untouched either way. Nothing after the first call.
  Status Abandon();

 private:
  friend Result<std::unique_ptr<PreparedRestore>> PrepareRestore(Store&, int64_t, const TrainingState&,
                                                                 const RestoreOptions&, const std::string&,
                                                                 BaseIdentityBuilder&, ContractCache*,
                                                                 const SnapshotInput&);
  ContractCache::Lease lease_;  // the plan's live tensors belong to this contract
  RestorePlan plan_;
  ExtrasUndo undo_;
  bool done_ = false;
};

// The first phase. On error every live object is unchanged. May throw
// c10::Error (the caller's ExceptionBoundary converts it). Chunks decode in
// parallel on the store's workers (see DecodeTensors). `contracts`: the
// target's contract comes from this cache (null: built for this restore
// alone); the cache is leased until the PreparedRestore is gone.
Result<std::unique_ptr<PreparedRestore>> PrepareRestore(Store& store, int64_t step, const TrainingState& target,
                                                        const RestoreOptions& options, const std::string& base_label,
                                                        BaseIdentityBuilder& base, ContractCache* contracts,
                                                        const SnapshotInput& input = {});

}  // namespace trainsnap::internal
