// Checkpointer: captures the whole LibTorch training state (trainable
// parameters, optimizer, scheduler, pending gradients, accumulation window,
// RNG, user state) into a Store, and restores it atomically and bit-exactly.
// What it captures is described in training_state.h (TrainingState) and
// stateful.h (user objects); how, in checkpointer_options.h.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <torch/torch.h>

#include "trainsnap/checkpointer_options.h"
#include "trainsnap/export.h"
#include "trainsnap/stateful.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"
#include "trainsnap/training_state.h"

namespace trainsnap {

// Figures of a Checkpointer's pipeline: staging memory and lag. Cheap to read
// (no store access) from the training thread, e.g. every step.
struct TRAINSNAP_EXPORT PipelineStats {
  // Step of the last capture of this Checkpointer that committed (it is
  // durable); nullopt before the first.
  std::optional<int64_t> last_committed_step;
  size_t captures_in_flight = 0;      // CaptureAsync returned, commit not finished
  size_t max_captures_in_flight = 0;  // CheckpointerOptions::max_captures_in_flight
  uint64_t capture_waits = 0;         // CaptureAsync calls that waited at that bound
  size_t max_staging_bytes = 0;
  size_t staging_in_use_bytes = 0;    // buffers handed out now
  size_t staging_cached_bytes = 0;    // buffers kept for reuse now
  size_t staging_peak_bytes = 0;      // highest staging_in_use_bytes so far
  uint64_t staging_allocations = 0;   // fresh buffers
  uint64_t staging_reuses = 0;        // buffers reused from earlier captures
  uint64_t staging_waits = 0;         // stagings that waited for memory (back-pressure)
  uint64_t captures_skipped = 0;      // CaptureAsync calls skipped by overhead_budget
  // Last committed step minus the step committed before it (how far apart
  // the budget lets commits fall); nullopt before the second commit.
  std::optional<int64_t> steps_between_last_commits;
};

namespace internal {
class CaptureState;
class CheckpointerInternal;
}  // namespace internal

// The outcome of one asynchronous capture. Copyable; every copy refers to the
// same capture. A default-constructed handle refers to none (Wait returns
// InvalidArgument).
class TRAINSNAP_EXPORT CaptureHandle {
 public:
  CaptureHandle() = default;
  explicit CaptureHandle(std::shared_ptr<internal::CaptureState> state);
  // Blocks until the snapshot committed or failed; its status (the same one
  // every time). Errors are those of Capture.
  Status Wait() const;
  // True once Wait would not block.
  bool Ready() const;
  int64_t step() const;
  // True if CheckpointerOptions::overhead_budget skipped this capture: nothing
  // was staged or stored, the handle is complete and Wait returns OK.
  bool skipped() const;

 private:
  std::shared_ptr<internal::CaptureState> state_;
};

struct TRAINSNAP_EXPORT RestoreOptions {
  // Restore pending gradients (mid-window snapshots); a gradient the
  // snapshot left out (CheckpointerOptions::gradients) becomes zeros, or
  // stays undefined if it was undefined at capture. When false, gradients of
  // the target are left as they are.
  bool restore_gradients = true;
  // Replace every param group's options (lr, betas, eps, weight_decay, ...)
  // with the snapshot's. When false, the target's groups keep the caller's
  // options and only the per-parameter state (exp_avg, step, ...) is restored.
  bool restore_optimizer_options = true;
  // Accept a snapshot without buffers (ModelState::kTrainable) for a target
  // that has some: the target's buffers are left as they are. When false
  // (default), that is a ContractMismatch naming the first such buffer.
  bool allow_missing_buffers = false;
  // Rollback: also delete every snapshot after the restored step, so that
  // training on from it may capture those steps again. The deletion (one
  // store transaction) comes after the snapshot is validated and decoded and
  // after the extra state accepted its bytes, before any tensor is written;
  // if it fails, the restore fails, the extras get their previous state
  // back and every live object is left as it was.
  bool discard_later = false;
  // Restore only what the target holds (e.g. the weights of one model, for
  // evaluation): the snapshot's models, optimizers, scheduler, accumulation
  // window and extra states that the target leaves out are skipped, and
  // their tensors are not read. What the target holds must be in the
  // snapshot, with the usual checks; the RNG is restored only when
  // target.rng is set. InvalidArgument for a target that holds nothing;
  // NotSupported when a left-out model has frozen parameters that the
  // snapshot's base content hash covers (CheckpointerOptions::
  // hash_base_content): the models given cannot be checked without them.
  bool partial = false;
  // Where the tensors a snapshot's placement stored elsewhere are read from
  // (TensorSources). Null: restoring such a snapshot is NotSupported, naming
  // the first such tensor and its source. Not owned.
  TensorSources* sources = nullptr;
};

// Thread-compatible: one training thread drives a Checkpointer. No exception
// escapes it: one thrown by LibTorch (c10::Error), the allocator or user
// code fails the call with Aborted ("LibTorch: <message>", "out of memory",
// ...). The Store must outlive it: destroying the Store while captures are still in flight
// aborts the process (every build) with a message naming the store and step.
// It remembers the contract (names, IDs, ties) of the last two sets of models
// it captured or restored, and builds it again only when something it was
// built from changes (a parameter, buffer or submodule added, removed,
// renamed or replaced, a shape, dtype, data pointer or requires_grad): a
// capture of unchanged models does not rebuild it. It keeps no reference to
// the models' tensors between calls.
class TRAINSNAP_EXPORT Checkpointer {
 public:
  // InvalidArgument for options out of range (overhead_budget), naming it.
  static Result<std::unique_ptr<Checkpointer>> Open(Store& store, CheckpointerOptions options = {});
  // As Open, for options known valid; with invalid ones, every capture
  // fails with Open's InvalidArgument.
  explicit Checkpointer(Store& store, CheckpointerOptions options = {});
  ~Checkpointer();  // waits for the captures in flight (Flush)
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Captures `state` as snapshot `step` (stage on this thread, then encode
  // and commit). On error nothing becomes visible. InvalidArgument: a frozen
  // parameter holds a gradient, tied names disagree, an optimizer holds a
  // tensor of no captured model; NotSupported: LBFGS or an unknown optimizer,
  // a tensor that cannot be staged (meta, sparse, mkldnn; named);
  // AlreadyExists: `step` is stored or in flight; InvalidArgument from the
  // store's retention for a step below the latest (RetentionPolicy).
  // Same as CaptureAsync(step, state) followed by Wait(): with
  // CheckpointerOptions::overhead_budget it may be skipped (OK, nothing
  // stored), the first capture after Open included.
  Status Capture(int64_t step, const TrainingState& state);
  // Stages `state` as snapshot `step` on this thread and returns as soon as
  // every tensor is staged (host copies taken or, for device tensors, queued
  // on a side stream ordered against the current stream): the caller may then
  // modify every tensor at once (optimizer step, zero_grad, in-place ops); the
  // snapshot holds the values of this call. Encode and commit run on the
  // pipeline's threads; commits happen in the order of the CaptureAsync calls.
  // Waits while max_captures_in_flight captures are in flight, and while the
  // staging bound is reached (max_staging_bytes). AlreadyExists (`step` is
  // stored or in flight) and staging errors (InvalidArgument, NotSupported)
  // are returned here and count for Flush; encode and commit errors (I/O,
  // NoSpace) come through the handle and Flush, and later captures still commit.
  Result<CaptureHandle> CaptureAsync(int64_t step, const TrainingState& state);
  // Waits for every capture in flight; returns the first error of a capture
  // since the last Flush (including those already seen through a handle).
  Status Flush();
  PipelineStats pipeline_stats() const;
  // Restores snapshot `step` into `target` (after every capture in flight
  // finished), whose composition must match the
  // snapshot's: same models (keys), trainable parameters (names, shapes,
  // dtypes, tying), frozen base, optimizers (type, param-group membership),
  // and scheduler/accumulation/extra present on both sides or neither; RNG is
  // restored when target.rng is set. Mismatches are ContractMismatch naming
  // the first difference; a damaged chunk is Corruption; an unknown manifest
  // version is NotSupported; a target tensor that refuses in-place writes
  // (created under c10::InferenceMode, expanded/overlapping) is
  // InvalidArgument. On error every live object is left bitwise unchanged
  // (a Stateful that refuses its bytes is rolled back with the rest).
  // Besides tensors, a restore replaces: each optimizer's whole per-parameter
  // state and its groups' options (lr, weight decay, ...: the snapshot's,
  // unless RestoreOptions::restore_optimizer_options is false), the
  // scheduler's step count, the accumulation window, the extras' state and
  // the RNG (when target.rng).
  // A target buffer absent from the snapshot is a ContractMismatch unless
  // options.allow_missing_buffers. To train on from an older step, restore
  // it with options.discard_later (or RollbackTo): the later steps' captures
  // would otherwise fail with AlreadyExists.
  Status Restore(int64_t step, const TrainingState& target, const RestoreOptions& options = {});
  // Restore(step, target) with discard_later: the rollback of a training run
  // to `step`, after which the following steps may be captured again.
  Status RollbackTo(int64_t step, const TrainingState& target);
  // Restores the latest snapshot and returns its step; NotFound when the
  // store has none. Errors are those of Restore.
  Result<int64_t> RestoreLatest(const TrainingState& target, const RestoreOptions& options = {});

 private:
  friend class internal::CheckpointerInternal;  // the two phases of Restore, for
                                                // DistributedCheckpointer
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainsnap
