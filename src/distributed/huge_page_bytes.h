// Byte tensors for the large buffers of a restore on several ranks (the
// packed tensors a rank decodes into and receives from the others), backed
// by transparent huge pages where the kernel offers them (madvise mode).
// A fresh 25 MiB tensor from at::empty is faulted in 4 KiB page by page as
// it is first written (by Gloo's receive or the decoder); measured on the
// 2-core VM, a Gloo broadcast of 25 MiB into fresh memory took 80-120 ms,
// into memory advised for huge pages 9-50 ms (bench/README.md, "Restore on
// several ranks: where the time goes").
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace trainsnap::internal {

// Buffers at least this large are advised for huge pages.
inline constexpr int64_t kHugePageBytes = int64_t{2} << 20;

// An uninitialized contiguous CPU tensor of `bytes` bytes (kByte); from
// kHugePageBytes up, 2 MiB-aligned and advised MADV_HUGEPAGE (at::empty
// when the allocation or the advice fails). Throws as at::empty does.
at::Tensor HugePageBytes(int64_t bytes);

}  // namespace trainsnap::internal
