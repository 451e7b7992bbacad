// ChangeTracker: tells a capture which tensors cannot have changed since the
// last committed capture, so that their stored records are reused (Store's
// SnapshotWriter::AddUnchangedTensor) instead of copying and hashing them.
//
// A tensor counts as unchanged when it is the same TensorImpl, its data
// pointer (storage + offset), sizes, strides and dtype are the same, and its
// version counter (`_version()`) has not moved. Every in-place op through
// ATen (add_, mul_, copy_, zero_, optimizer steps, Restore) bumps the version
// counter; set_data() and assigning a new tensor change the data pointer or
// the impl. LIMITATION: writes through a raw pointer (data_ptr(), memcpy,
// a custom kernel, another library sharing the memory) do NOT bump the
// version and are invisible here: turn CheckpointerOptions::skip_unchanged
// off when the training code writes tensors that way. Inference tensors have
// no version counter and are never reused. Tensors that require grad are
// never reused either: LibTorch 1.13's SGD updates parameters through
// `.data()` (no version bump). The checkpointer asks only about frozen
// parameters: buffers are skipped too, since kernels such as batch norm
// update running statistics in place without (reliably) bumping the counter.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "common/mutex.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

// A staged tensor that is added by reference to an earlier snapshot: its
// record, read from `from_step` while staging (that snapshot may be pruned
// before the capture commits; the record's chunks are then still live in
// the snapshots after it, and the writer pins them).
struct UnchangedTensor {
  uint64_t param_id = 0;
  std::string role;
  int64_t from_step = 0;
  std::string name;  // for error messages
  TensorRecord record;
};

// Thread-safe: Observe runs on the training thread, Committed/Abandoned
// wherever the capture finishes. Assumes this tracker's checkpointer is the
// only one writing the steps it captures.
class ChangeTracker {
 public:
  // Starts the capture of `step`. Forgets every reference when the last
  // committed step is no longer in `store` (deleted, rolled back, pruned).
  Status BeginCapture(Store& store, int64_t step) EXCLUDES(mu_);
  // Whether (param_id, role) may be reused, and from which step: `tensor`
  // is unchanged since the last committed capture that included it. Records
  // the tensor's identity for the capture of `step` either way.
  std::optional<int64_t> Observe(int64_t step, uint64_t param_id, const std::string& role,
                                 const torch::Tensor& tensor) EXCLUDES(mu_);
  // The capture of `step` committed: its observations become the reference
  // (tensors it did not observe are forgotten).
  void Committed(int64_t step) EXCLUDES(mu_);
  // The capture of `step` failed: its observations are dropped.
  void Abandoned(int64_t step) EXCLUDES(mu_);
  // Forgets everything (e.g. after a restore into other tensors).
  void Reset() EXCLUDES(mu_);

 private:
  struct Identity {
    // Weak: keeps the impl's address from being reused. Always set once observed.
    std::optional<c10::weak_intrusive_ptr<c10::TensorImpl>> impl;
    const void* data = nullptr;
    std::vector<int64_t> sizes;
    std::vector<int64_t> strides;
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    c10::Device device = c10::Device(c10::kCPU);
    int64_t version = -1;
  };
  struct Reference {
    Identity identity;
    int64_t step = 0;
  };
  using Key = std::pair<uint64_t, std::string>;

  static std::optional<Identity> IdentityOf(const torch::Tensor& tensor);
  static bool Same(const Identity& a, const Identity& b);

  // Held across Store::Contains in BeginCapture: taken before the store's locks.
  Mutex mu_;
  std::map<Key, Reference> committed_ GUARDED_BY(mu_);
  std::optional<int64_t> committed_step_ GUARDED_BY(mu_);
  std::map<int64_t, std::map<Key, Identity>> pending_ GUARDED_BY(mu_);  // by step
};

}  // namespace trainsnap::internal
