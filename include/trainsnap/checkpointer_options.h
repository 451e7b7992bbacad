// CheckpointerOptions, the options a Checkpointer is opened with, and the
// placement of tensors over several stores they may name (TensorPlacement,
// TensorSources; used by DistributedCheckpointer). Included by
// checkpointer.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "trainsnap/export.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"
#include "trainsnap/training_state.h"

namespace trainsnap {

// Placement of tensors over several stores (multi-process runs, where a
// replicated tensor is stored by one process only; DistributedCheckpointer
// uses it). A single-process Checkpointer needs none of this.
//
// One tensor of a capture, as CheckpointerOptions::placement sees it.
struct TRAINSNAP_EXPORT PlacementCandidate {
  std::string name;     // qualified name of its parameter or buffer
  std::string role;     // "param", "buffer", or an optimizer state's role ("exp_avg", "<key>:exp_avg", ...)
  uint64_t bytes = 0;   // numel * element size
  torch::Tensor tensor; // the live tensor; read it only during Place
};

// Decides which candidate tensors of a capture this store holds.
class TRAINSNAP_EXPORT TensorPlacement {
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
class TRAINSNAP_EXPORT TensorSources {
 public:
  virtual ~TensorSources() = default;
  // The store `source` names, open (read-only is enough); owned by the
  // callee and valid until the restore returns. Its error fails the restore.
  virtual Result<Store*> Source(const std::string& source) = 0;
};

struct TRAINSNAP_EXPORT CheckpointerOptions {
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
  // CaptureAsync skips a capture that would exceed it over the wall time since
  // the Checkpointer was opened (predicted from the recent captures' cost; the
  // first capture's from the bytes it will copy, so that it waits until the
  // wall time pays for it), and one that would wait at max_captures_in_flight.
  // A skip is not an error: the handle is complete, skipped() is true.
  // Default 0 = off (never skips). Negative, NaN or >= 1: Open returns
  // InvalidArgument. See README.md, "Overhead budget".
  double overhead_budget = 0;
};

}  // namespace trainsnap
