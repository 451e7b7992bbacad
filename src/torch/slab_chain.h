// Small host tensors cut from larger uint8 buffers ("slabs"), for capture's
// staging (StagingSlabs, capture/staging_pool.h) and restore's decode: a
// tensor under kSmallTensorBytes allocated on its own costs an aligned malloc
// of its own, and 150,000 of them fragmented glibc's heap (why: StagingSlabs).
#pragma once

#include <cstddef>

#include <torch/torch.h>

namespace trainsnap::internal {

// Tensors of fewer bytes are cut from slabs (by both users above).
constexpr size_t kSmallTensorBytes = 4096;
// Bytes of one slab.
constexpr size_t kSlabBytes = size_t{256} << 10;
// Alignment of every piece, and so of its data pointer: a cache line.
constexpr size_t kSlabAlignment = 64;

// A contiguous tensor of `sizes`/`dtype` cut from the uint8 buffer `slab` at
// offset `*used` (a multiple of kSlabAlignment), which then moves past it,
// rounded up to the next multiple; the piece shares the slab's storage and
// so keeps it alive. An undefined tensor when the rest of the slab is too
// small, or when the piece would not start on a whole element of `dtype`
// (a slab whose own data starts off a kSlabAlignment boundary).
torch::Tensor CutFromSlab(const torch::Tensor& slab, size_t* used, c10::IntArrayRef sizes, c10::ScalarType dtype);

// Pieces cut from the current slab; `fresh()` gives the next one (a uint8
// buffer at least as large as any piece) when the rest is too small. Not
// thread-safe.
class SlabChain {
 public:
  template <typename Fresh>
  torch::Tensor Cut(c10::IntArrayRef sizes, c10::ScalarType dtype, Fresh&& fresh) {
    if (slab_.defined()) {
      torch::Tensor piece = CutFromSlab(slab_, &used_, sizes, dtype);
      if (piece.defined()) return piece;
    }
    slab_ = fresh();
    used_ = 0;
    return CutFromSlab(slab_, &used_, sizes, dtype);
  }

 private:
  torch::Tensor slab_;
  size_t used_ = 0;
};

}  // namespace trainsnap::internal
