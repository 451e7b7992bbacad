// Small host tensors cut from larger uint8 buffers ("slabs"), for capture's
// staging (StagingSlabs, capture/staging_pool.h) and restore's decode: a
// tensor under kSmallTensorBytes allocated on its own costs an aligned malloc
// of its own, and 150,000 of them fragmented glibc's heap (why: StagingSlabs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace trainsnap::internal {

// Tensors of fewer bytes are cut from slabs (by both users above).
constexpr size_t kSmallTensorBytes = 4096;
// Bytes of one slab.
constexpr size_t kSlabBytes = size_t{256} << 10;
// Alignment of every piece, and so of its data pointer: a cache line.
constexpr size_t kSlabAlignment = 64;

// What a piece of `bytes` takes of a slab: `bytes` rounded up to a whole
// kSlabAlignment.
constexpr size_t SlabPieceBytes(size_t bytes) { return (bytes + kSlabAlignment - 1) / kSlabAlignment * kSlabAlignment; }
// Every small tensor fits a fresh slab: SlabChain::CutBytes, which makes no
// tensor that could bounds-check the piece, relies on it.
static_assert(SlabPieceBytes(kSmallTensorBytes) <= kSlabBytes);

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
    NextSlab(fresh());
    return CutFromSlab(slab_, &used_, sizes, dtype);
  }

  // `bytes` (more than 0, at most a slab) of the current slab, as a bare
  // pointer aligned to kSlabAlignment: no tensor is made for the piece, so
  // nothing keeps its slab alive but `keep` (the same vector on every
  // call), which receives every slab a piece comes from, once each, and
  // must outlive the pieces' use. A TensorImpl per piece was a fifth of a
  // capture's stall at 150,000 small tensors, growing faster than their
  // count.
  template <typename Fresh>
  uint8_t* CutBytes(size_t bytes, Fresh&& fresh, std::vector<torch::Tensor>* keep) {
    const size_t piece = SlabPieceBytes(bytes);
    if (!slab_.defined() || used_ > slab_.nbytes() || piece > slab_.nbytes() - used_) NextSlab(fresh());
    if (!kept_) {
      keep->push_back(slab_);
      kept_ = true;
    }
    uint8_t* out = static_cast<uint8_t*>(slab_.data_ptr()) + used_;
    used_ += piece;
    return out;
  }

 private:
  void NextSlab(torch::Tensor slab) {
    slab_ = std::move(slab);
    used_ = 0;
    kept_ = false;
  }

  torch::Tensor slab_;
  size_t used_ = 0;
  bool kept_ = false;  // slab_ is in a CutBytes caller's `keep`
};

}  // namespace trainsnap::internal
