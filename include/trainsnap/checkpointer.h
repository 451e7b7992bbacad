// Checkpointer: captures the whole LibTorch training state (trainable
// parameters, optimizer, scheduler, pending gradients, accumulation window,
// RNG, user state) into a Store, and restores it atomically and bit-exactly.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
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
// custom scheduler, ... LoadState returns an error rather than throwing.
class Stateful {
 public:
  virtual ~Stateful() = default;
  virtual std::string SaveState() const = 0;
  virtual Status LoadState(std::string_view bytes) = 0;
};

// Which module tensors a snapshot holds besides optimizer state and gradients.
enum class ModelState {
  kTrainable,            // parameters with requires_grad (LoRA: the adapters)
  kTrainableAndBuffers,  // plus every buffer (batch-norm statistics, ...)
  kFull,                 // every parameter and buffer, frozen ones included
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
  std::map<std::string, torch::nn::Module*> models;
  std::map<std::string, torch::optim::Optimizer*> optimizers;
};

struct CheckpointerOptions {
  ModelState model_state = ModelState::kTrainable;
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
};

// Staging-memory figures of a Checkpointer's pipeline (for tests and benchmarks).
struct PipelineStats {
  size_t max_staging_bytes = 0;
  size_t staging_in_use_bytes = 0;    // buffers handed out now
  size_t staging_cached_bytes = 0;    // buffers kept for reuse now
  size_t staging_peak_bytes = 0;      // highest staging_in_use_bytes so far
  uint64_t staging_allocations = 0;   // fresh buffers
  uint64_t staging_reuses = 0;        // buffers reused from earlier captures
  uint64_t staging_waits = 0;         // stagings that waited for memory (back-pressure)
};

namespace internal {
class CaptureState;
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

 private:
  std::shared_ptr<internal::CaptureState> state_;
};

struct RestoreOptions {
  // Restore pending gradients (mid-window snapshots). When false, gradients
  // of the target are left as they are.
  bool restore_gradients = true;
};

// Thread-compatible: one training thread drives a Checkpointer. The Store
// must outlive it.
class Checkpointer {
 public:
  explicit Checkpointer(Store& store, CheckpointerOptions options = {});
  ~Checkpointer();  // waits for the captures in flight (Flush)
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Captures `state` as snapshot `step` (stage on this thread, then encode
  // and commit). On error nothing becomes visible. InvalidArgument: a frozen
  // parameter holds a gradient, tied names disagree, an optimizer holds a
  // tensor of no captured model; NotSupported: LBFGS or an unknown optimizer;
  // AlreadyExists: `step` is stored.
  // Same as CaptureAsync(step, state) followed by Wait().
  Status Capture(int64_t step, const TrainingState& state);
  // Stages `state` as snapshot `step` on this thread and returns as soon as
  // every tensor is staged (host copies taken or, for device tensors, queued
  // on a side stream ordered against the current stream): the caller may then
  // modify every tensor at once (optimizer step, zero_grad, in-place ops); the
  // snapshot holds the values of this call. Encode and commit run on the
  // pipeline's threads; commits happen in the order of the CaptureAsync calls.
  // Waits while the staging bound is reached (CheckpointerOptions::
  // max_staging_bytes). Staging errors (InvalidArgument, NotSupported) are
  // returned here; encode and commit errors (AlreadyExists, I/O) through the
  // handle and Flush, and later captures still commit.
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
  // version is NotSupported. On error every live object is left bitwise
  // unchanged (a Stateful that refuses its bytes is rolled back with the rest).
  Status Restore(int64_t step, const TrainingState& target, const RestoreOptions& options = {});
  // Restores the latest snapshot and returns its step; NotFound when the
  // store has none. Errors are those of Restore.
  Result<int64_t> RestoreLatest(const TrainingState& target, const RestoreOptions& options = {});

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainsnap
