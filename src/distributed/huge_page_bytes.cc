#include "distributed/huge_page_bytes.h"

#include <sys/mman.h>

#include <cstdlib>

namespace trainsnap::internal {

at::Tensor HugePageBytes(int64_t bytes) {
  if (bytes < kHugePageBytes) return at::empty({bytes}, at::kByte);
  // aligned_alloc wants a multiple of the alignment.
  const size_t size = (static_cast<size_t>(bytes) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* memory = std::aligned_alloc(static_cast<size_t>(kHugePageBytes), size);
  if (memory == nullptr) return at::empty({bytes}, at::kByte);
  // Advice only: without THP (or with it off) the pages are 4 KiB ones.
  (void)madvise(memory, size, MADV_HUGEPAGE);
  return at::from_blob(
      memory, {bytes}, [](void* p) { std::free(p); }, at::TensorOptions().dtype(at::kByte));
}

}  // namespace trainsnap::internal
