// Checkpointer: captures the whole LibTorch training state (trainable
// parameters, optimizer, scheduler, pending gradients, accumulation window,
// RNG, user state) into a Store, and restores it atomically and bit-exactly.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <torch/torch.h>

#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap {

// Where a gradient-accumulation window stands. Snapshots taken mid-window
// restore it together with the pending gradients.
struct AccumulationWindow {
  int64_t micro_step = 0;   // micro-steps already accumulated in this window
  int64_t size = 1;         // micro-steps per optimizer step
  double weight_sum = 0.0;  // sum of the weights of the accumulated micro-steps
  double scale = 1.0;       // the loss scale in use
};

// Any object whose state must survive a restart: a data-loader cursor, a
// custom scheduler, ... LoadState returns an error rather than throwing; an
// exception of any type from either call fails the capture/restore (Aborted).
class Stateful {
 public:
  virtual ~Stateful() = default;
  virtual std::string SaveState() const = 0;
  virtual Status LoadState(std::string_view bytes) = 0;
};

// What a TensorStateful saves and loads. `type` and `bytes` are stored in the
// manifest (`trainsnap show` prints the type); each tensor is stored like a
// model tensor (chunked, deduplicated, compressed).
struct TensorState {
  std::string type;                               // e.g. "torch.optim.adamw.AdamW"
  std::string bytes;                              // opaque to trainsnap
  std::map<std::string, torch::Tensor> tensors;   // dense, any device
};

// State that holds tensors, of an object with no built-in adapter (the
// Python binding's optimizers, schedulers and extras). SaveState runs on the
// capturing thread; its tensors are staged (copied) before CaptureAsync
// returns. LoadState runs once the snapshot is validated and decoded, before
// any model tensor is written: `state.tensors` are fresh host tensors with
// the saved names, shapes and dtypes (those under 4 KiB share larger buffers:
// keep them as they are or copy them, but do not resize them). An error (or exception: Aborted) from
// LoadState fails the restore, and the extras already loaded get their
// previous state back (SaveState, taken before the first load).
class TensorStateful {
 public:
  virtual ~TensorStateful() = default;
  virtual Status SaveState(TensorState* state) const = 0;
  virtual Status LoadState(TensorState state) = 0;
};

// Which module tensors a snapshot holds besides optimizer state and gradients.
enum class ModelState {
  // Parameters with requires_grad only (LoRA: the adapters). Opt-out of the
  // default: a resume is bit-exact only if no buffer changes during training
  // (no BatchNorm in training mode). Restoring such a snapshot into a model
  // with buffers needs RestoreOptions::allow_missing_buffers.
  kTrainable,
  kTrainableAndBuffers,  // plus every buffer (BatchNorm statistics, ...): the default
  kFull,                 // every parameter and buffer, frozen ones included
};

// Which pending gradients (.grad() of trainable parameters) a snapshot holds.
enum class Gradients {
  // Only where they carry state: in the middle of an accumulation window
  // (TrainingState::accumulation with micro_step != 0), or always when no
  // window is given. At a window boundary they are omitted: the next window
  // starts by zeroing them.
  kAuto,
  kAlways,  // every non-zero gradient is stored
  // None: for loops that zero the gradients before every backward (a GAN,
  // one optimizer step per batch without accumulation).
  kNever,
};

// Non-owning views of the live training objects. Every pointer may be null.
// The named maps hold extra models/optimizers (a GAN's G and D, a frozen
// teacher); their parameter IDs are qualified by the map key.
struct TrainingState {
  torch::nn::Module* model = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  torch::optim::LRScheduler* scheduler = nullptr;
  AccumulationWindow* accumulation = nullptr;
  bool rng = true;                          // torch's default generators
  std::map<std::string, Stateful*> extra;   // data-loader cursor, custom schedulers, ...
  // Extra state with tensors; keys share extra's namespace; one in both, or with a '/', is InvalidArgument.
  std::map<std::string, TensorStateful*> tensor_extra;
  std::map<std::string, torch::nn::Module*> models;
  std::map<std::string, torch::optim::Optimizer*> optimizers;
};

// Placement of tensors over several stores (multi-process runs, where a
// replicated tensor is stored by one process only; DistributedCheckpointer
// uses it). A single-process Checkpointer needs none of this.
//
// One tensor of a capture, as CheckpointerOptions::placement sees it.
struct PlacementCandidate {
  std::string name;     // qualified name of its parameter or buffer
  std::string role;     // "param", "buffer", or an optimizer state's role ("exp_avg", "<key>:exp_avg", ...)
  uint64_t bytes = 0;   // numel * element size
  torch::Tensor tensor; // the live tensor; read it only during Place
};

// Decides which candidate tensors of a capture this store holds.
class TensorPlacement {
 public:
  virtual ~TensorPlacement() = default;
  // Called once per capture on the capturing thread, before any candidate is
  // copied. `candidates`: every model tensor (parameters, buffers, frozen
  // parameters per ModelState) and optimizer-state tensor the snapshot
  // holds, sorted by (name, role); pending gradients and tensor_extra are
  // always stored here and never offered. Returns one entry per candidate:
  // empty = stored here; otherwise the name of the source that holds its
  // bytes: the snapshot of the same step in that source holds a tensor of
  // the same name and role. The manifest records the source; the bytes are
  // not copied nor stored here. An error (or a result of another size:
  // InvalidArgument) fails the capture.
  virtual Result<std::vector<std::string>> Place(int64_t step,
                                                 const std::vector<PlacementCandidate>& candidates) = 0;
};

// Resolves the sources a TensorPlacement named, at restore.
class TensorSources {
 public:
  virtual ~TensorSources() = default;
  // The store `source` names, open (read-only is enough); owned by the
  // callee and valid until the restore returns. Its error fails the restore.
  virtual Result<Store*> Source(const std::string& source) = 0;
};

struct CheckpointerOptions {
  // Default kTrainableAndBuffers: buffers are small, and unchanged ones
  // cost no bytes after the first snapshot (deduplicated chunks).
  ModelState model_state = ModelState::kTrainableAndBuffers;
  // Default kAuto. A gradient left out is recorded as such (defined or not):
  // restore sets it to zeros, as zero_grad() leaves it, or leaves it undefined.
  Gradients gradients = Gradients::kAuto;
  // Caller's name for the frozen base (e.g. a model hub revision). Checked at
  // restore when non-empty in the snapshot. Empty = not recorded.
  std::string base_label;
  // Also fingerprint the frozen parameters' bytes (computed once, cached).
  bool hash_base_content = false;
  // Reuse the stored record of a frozen parameter that is the same tensor
  // object, on the same memory, with the same version counter as at the last
  // committed capture (no copy, no hash). In-place ops (add_, copy_, optimizer steps,
  // zero_grad) bump the version counter; writes through a raw data pointer
  // (data_ptr(), memcpy, custom kernels) and through `.data()` do NOT:
  // turn this off if the training code modifies tensors that way.
  bool skip_unchanged = true;
  // Threads of the capture pipeline (encode and commit of asynchronous
  // captures, parallel restore decode). 0 = StoreOptions::threads of the
  // store (whose 0 means hardware threads).
  int threads = 0;
  // Upper bound on the host staging memory of the captures in flight
  // (pooled buffers handed out plus those kept for reuse). 0 = the store's
  // StoreOptions::max_staging_bytes (whose 0 means 1 GiB).
  // CaptureAsync waits (back-pressure) rather than exceed it while other
  // captures are in flight; a single capture larger than the bound is
  // admitted alone (it waits for every other capture to finish, then stages
  // in full, so that it cannot deadlock).
  size_t max_staging_bytes = 0;
  // Upper bound on the captures in flight (CaptureAsync returned, commit not
  // finished), in snapshots: bounds the steps a crash can lose to the ones
  // still in flight. CaptureAsync waits (back-pressure) for the oldest to
  // finish rather than exceed it. 0 = no bound in steps (only the bytes).
  int max_captures_in_flight = 4;
  // Per-tensor placement over several stores (TensorPlacement); null = every
  // tensor is stored here. Not owned; must outlive the Checkpointer.
  TensorPlacement* placement = nullptr;
  // The largest fraction of the training thread's wall time that captures may
  // take (CaptureAsync's staging, stalls and back-pressure waits), e.g. 0.02.
  // CaptureAsync skips a capture that would exceed it (predicted from the
  // recent captures' cost), and one that would wait at max_captures_in_flight;
  // the first capture always runs. A skip is not an error: the handle is
  // complete, skipped() is true. Default 0 = off (never skips). Negative, NaN
  // or >= 1: Open returns InvalidArgument. See README.md, "Overhead budget".
  double overhead_budget = 0;
};

// Figures of a Checkpointer's pipeline: staging memory and lag. Cheap to read
// (no store access) from the training thread, e.g. every step.
struct PipelineStats {
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
class CaptureHandle {
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

struct RestoreOptions {
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
class Checkpointer {
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
  // Same as CaptureAsync(step, state) followed by Wait().
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
