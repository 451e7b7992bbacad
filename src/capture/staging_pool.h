// StagingPool: host staging buffers for captures in flight, reused between
// captures (free lists keyed by size class) and bounded in bytes.
//
// Bound: the bytes of the buffers handed out plus those kept for reuse stay
// within max_bytes. Acquire waits (back-pressure) while other owners (other
// snapshots in flight) hold buffers and the new one would exceed the bound;
// they release theirs as their encodes finish. An owner alone in flight is
// always admitted, so a single snapshot larger than the bound still goes
// through (alone: its peak is its own size) rather than deadlocking.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "common/mutex.h"
#include "torch/slab_chain.h"

namespace trainsnap::internal {

// The buffers one snapshot holds; shared by the pool and the buffers' deleters.
struct StagingOwner {
  size_t held = 0;  // guarded by the pool's mu_ (not expressible as GUARDED_BY: another object's lock)
};

struct StagingPoolStats {
  size_t max_bytes = 0;
  size_t in_use_bytes = 0;  // handed out now (size-class bytes)
  size_t cached_bytes = 0;  // kept for reuse now
  size_t peak_in_use_bytes = 0;
  uint64_t allocations = 0;  // fresh buffers
  uint64_t reuses = 0;       // buffers served from the free lists
  uint64_t waits = 0;        // Acquire calls that had to wait
};

class StagingPool : public std::enable_shared_from_this<StagingPool> {
 public:
  static constexpr size_t kDefaultMaxBytes = size_t{1} << 30;

  // max_bytes 0 = kDefaultMaxBytes.
  static std::shared_ptr<StagingPool> Create(size_t max_bytes);

  // A contiguous CPU tensor of `sizes`/`dtype` (pinned when `pinned`) whose
  // memory returns to the pool when the last reference to it dies. Charged to
  // `owner` until then. Waits as described above. May throw c10::Error or
  // std::bad_alloc from the allocator.
  torch::Tensor Acquire(c10::IntArrayRef sizes, c10::ScalarType dtype, bool pinned,
                        const std::shared_ptr<StagingOwner>& owner) EXCLUDES(mu_);

  StagingPoolStats stats() const EXCLUDES(mu_);
  // Bytes charged for a request of `bytes`: rounded up to one of 8 classes
  // per power of two (at most 12.5% over), at least 4 KiB.
  static size_t SizeClass(size_t bytes);

 private:
  explicit StagingPool(size_t max_bytes) : max_bytes_(max_bytes) {}
  void Release(torch::Tensor backing, size_t size_class, bool pinned, StagingOwner* owner) EXCLUDES(mu_);
  // Whether a buffer of `size_class` may be handed to `owner` now (the bound).
  bool Admissible(size_t size_class, const StagingOwner& owner) const REQUIRES(mu_);

  using FreeKey = std::pair<size_t, bool>;  // (size class, pinned)
  const size_t max_bytes_;
  // A leaf lock (docs/code-map.md). Release runs in buffers' deleters, on
  // whichever thread drops the last reference: no lock may be held there.
  mutable Mutex mu_;
  std::condition_variable released_;  // a buffer came back
  std::map<FreeKey, std::vector<torch::Tensor>> free_ GUARDED_BY(mu_);
  StagingPoolStats stats_ GUARDED_BY(mu_);
};

// Small staging buffers cut from larger pooled ones ("slabs"). A request under
// kSmallTensorBytes would otherwise take a whole 4 KiB pool buffer of its own: a
// capture of 150,000 tensors of 256 bytes then allocated 600 MB in 150,000
// aligned mallocs, and glibc's allocator, fragmented by them, made every
// later allocation of capture and restore slower (50k parameters took 15-22x
// the time of 5k; bench/README.md, "Many small tensors"). The first
// kUnslabbed small requests of a capture still get buffers of their own, so
// that a capture of a few small tensors (LoRA adapters) is charged and
// bounded per tensor as before; slabs serve the rest. A slab returns to the
// pool when the carver, every piece tensor cut from it and every `keep`
// holding it (CutBytes: the staging area of bare pieces) are gone, and is
// charged to the owner as one pool buffer. One per capture (StagingScope): not
// thread-safe.
class StagingSlabs {
 public:
  static constexpr size_t kUnslabbed = 256;

  // As StagingPool::Acquire, for a request of fewer than kSmallTensorBytes bytes
  // (more than 0).
  torch::Tensor Acquire(StagingPool& pool, c10::IntArrayRef sizes, c10::ScalarType dtype, bool pinned,
                        const std::shared_ptr<StagingOwner>& owner);
  // `bytes` (more than 0, under kSmallTensorBytes) of an unpinned slab as a
  // bare pointer (SlabChain::CutBytes: `keep` holds the slabs), or null while
  // the request is among the first kUnslabbed (then Acquire serves it).
  uint8_t* CutBytes(StagingPool& pool, size_t bytes, const std::shared_ptr<StagingOwner>& owner,
                    std::vector<torch::Tensor>* keep);

 private:
  size_t requests_ = 0;
  SlabChain slabs_[2];  // unpinned, pinned
};

}  // namespace trainsnap::internal
