// Stage, the first step of a capture (stage -> encode -> commit): on the
// training thread, copy every tensor of the training state into host staging
// memory and describe it all in the manifest. Nothing is written yet.
#pragma once

#include <cstdint>
#include <memory>

#include <google/protobuf/arena.h>

#include "torch/base_identity.h"
#include "torch/contract_cache.h"
#include "capture/change_tracker.h"
#include "capture/staging.h"
#include "manifest.pb.h"
#include "trainsnap/checkpointer.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

// Everything one capture writes; independent of the live objects once built.
struct StagedSnapshot {
  StagedSnapshot();
  StagedSnapshot(const StagedSnapshot&) = delete;
  StagedSnapshot& operator=(const StagedSnapshot&) = delete;

  int64_t step = 0;
  // The manifest's messages (several per tensor: names, shape, optimizer
  // roles) live in this arena (ManifestArenaOptions, manifest_codec.h).
  std::unique_ptr<google::protobuf::Arena> arena;
  proto::TrainingManifest& manifest;  // in `arena`
  StagingArea staging;
  // Tensors the change tracker found unchanged: added by reference, not staged.
  std::vector<UnchangedTensor> unchanged;
  // The live tensor of each `unchanged` entry, for the placement only
  // (CheckpointerOptions::placement); cleared once it ran.
  std::vector<torch::Tensor> unchanged_live;
};

// Reuse of unchanged tensors: both set, or neither (no reuse).
struct Reuse {
  ChangeTracker* tracker = nullptr;
  Store* store = nullptr;  // where the tracker's steps are committed
};

// Whether a capture stages the trainable parameters' gradients: always
// with Gradients::kAlways, never with kNever; with kAuto, when no
// accumulation window is given or in the middle of one (a window boundary
// holds no pending gradient that the next window does not zero first).
bool StagesGradients(const CheckpointerOptions& options, const TrainingState& state);

// InvalidArgument for a frozen parameter holding a gradient, a bad tie, a
// null extra; NotSupported for an unsupported optimizer or dtype; Aborted
// when a Stateful's SaveState throws. May throw c10::Error (the caller's
// ExceptionBoundary converts it). With `reuse`, frozen parameters unchanged since the tracker's last
// committed capture go to StagedSnapshot::unchanged (with their records read
// from `reuse.store`) instead of the staging area. `scope`: see StagingArea's
// constructor (null: plain copies, readable at once; otherwise the caller
// finishes the scope before the staged bytes are read, and the staged
// snapshot's staging area makes no copy after Stage returns). `contracts`:
// the contract comes from this cache (null: built for this capture alone).
Result<std::unique_ptr<StagedSnapshot>> Stage(int64_t step, const TrainingState& state,
                                              const CheckpointerOptions& options, BaseIdentityBuilder& base,
                                              const Reuse& reuse = {}, StagingScope* scope = nullptr,
                                              ContractCache* contracts = nullptr);

}  // namespace trainsnap::internal
