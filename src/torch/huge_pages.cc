#include "torch/huge_pages.h"

#include <sys/mman.h>

#include <cstdlib>

namespace trainsnap::internal {

at::Tensor HugePageBytes(int64_t bytes) {
  if (bytes < kHugePageBytes) return at::empty({bytes}, at::kByte);
  // aligned_alloc wants a multiple of the alignment.
  const size_t size = (static_cast<size_t>(bytes) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* memory = std::aligned_alloc(static_cast<size_t>(kHugePageBytes), size);
  if (memory == nullptr) return at::empty({bytes}, at::kByte);
  (void)madvise(memory, size, MADV_HUGEPAGE);
  try {
    return at::from_blob(
        memory, {bytes}, [](void* p) { std::free(p); }, at::TensorOptions().dtype(at::kByte));
  } catch (...) {
    std::free(memory);
    throw;
  }
}

void AdviseHugePages(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.device().is_cpu() || static_cast<int64_t>(tensor.nbytes()) < kAdviseHugePagesFrom) {
    return;
  }
  const auto page = static_cast<uintptr_t>(kHugePageBytes);
  const auto start = reinterpret_cast<uintptr_t>(tensor.data_ptr());
  const uintptr_t begin = (start + page - 1) & ~(page - 1);
  const uintptr_t end = (start + tensor.nbytes()) & ~(page - 1);
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

}  // namespace trainsnap::internal
