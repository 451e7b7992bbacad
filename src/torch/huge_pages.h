// Large host buffers of a restore on transparent huge pages, where the
// kernel offers them (THP in madvise mode). A fresh multi-MiB tensor from
// at::empty is faulted in 4 KiB page by page as it is first written (by the
// decoder, or by Gloo's receive); measured on the 2-core VM, a Gloo
// broadcast of 25 MiB into fresh memory took 80-120 ms, into memory advised
// for huge pages 9-50 ms (bench/README.md, "Restore on several ranks: where
// the time goes"). Advice only: without THP the pages stay 4 KiB ones.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace trainsnap::internal {

// The huge page size advised for, and HugePageBytes' threshold.
inline constexpr int64_t kHugePageBytes = int64_t{2} << 20;
// Tensors AdviseHugePages advises: from this size up one whole huge page
// lies inside whatever their alignment.
inline constexpr int64_t kAdviseHugePagesFrom = 2 * kHugePageBytes;

// An uninitialized contiguous CPU tensor of `bytes` bytes (kByte); from
// kHugePageBytes up, 2 MiB-aligned and advised MADV_HUGEPAGE, its
// allocation rounded up to whole 2 MiB pages (at::empty when the allocation
// fails). Its storage is not resizable (from_blob): for internal buffers
// only, which get every page advised; a tensor handed to the user stays an
// ordinary allocation (AdviseHugePages). Throws as at::empty does.
at::Tensor HugePageBytes(int64_t bytes);

// Advises MADV_HUGEPAGE on the whole 2 MiB pages inside `tensor`'s bytes
// when it is a CPU tensor of at least kAdviseHugePagesFrom bytes, before
// anything writes it (pages already touched keep their size). For tensors
// the restore hands to the user (an ordinary allocation stays ordinary).
void AdviseHugePages(const at::Tensor& tensor);

}  // namespace trainsnap::internal
