#include "torch/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace trainsnap::testing {
namespace {

using internal::AdviseHugePages;
using internal::HugePageBytes;
using internal::kAdviseHugePagesFrom;
using internal::kHugePageBytes;

// Every size gives a contiguous byte tensor of exactly that many bytes,
// writable to its last byte; from kHugePageBytes up its memory starts on a
// 2 MiB boundary (what MADV_HUGEPAGE needs), below it at::empty's.
TEST(HugePagesTest, HugePageBytesExactSizeWritableAndAlignedFromTwoMiB) {
  for (int64_t bytes : std::vector<int64_t>{0, 1, kHugePageBytes - 1, kHugePageBytes, kHugePageBytes + 1,
                                            int64_t{25} << 20}) {
    at::Tensor t = HugePageBytes(bytes);
    ASSERT_EQ(t.numel(), bytes);
    EXPECT_EQ(t.scalar_type(), at::kByte);
    EXPECT_TRUE(t.is_contiguous());
    if (bytes == 0) continue;
    t.fill_(0xA5);
    t[bytes - 1] = 0x3C;
    EXPECT_EQ(t.sum().item<int64_t>(), (bytes - 1) * 0xA5 + 0x3C) << bytes;
    const auto address = reinterpret_cast<uintptr_t>(t.data_ptr());
    if (bytes >= kHugePageBytes) EXPECT_EQ(address % static_cast<uintptr_t>(kHugePageBytes), 0u) << bytes;
  }
}

// The memory outlives the first tensor while a view holds it (from_blob's
// deleter runs with the last reference), as the exchanged tensors' views do.
TEST(HugePagesTest, AViewKeepsHugePageBytesMemory) {
  at::Tensor view;
  {
    at::Tensor t = HugePageBytes(int64_t{3} << 20);
    t.fill_(7);
    view = t.narrow(0, int64_t{1} << 20, 16);
  }
  EXPECT_EQ(view.sum().item<int64_t>(), 16 * 7);
}

// Advice changes no byte, size or storage: a tensor advised before and after
// being written holds what was written, small, large, undefined or a view.
TEST(HugePagesTest, AdviseHugePagesChangesNothingVisible) {
  AdviseHugePages(at::Tensor());
  for (int64_t numel : std::vector<int64_t>{1, kAdviseHugePagesFrom / 4 - 1, kAdviseHugePagesFrom / 4,
                                            (int64_t{9} << 20) + 3}) {
    at::Tensor t = at::empty({numel}, at::kFloat);
    const void* data = t.data_ptr();
    AdviseHugePages(t);
    t.copy_(at::arange(numel, at::kFloat));
    AdviseHugePages(t);
    AdviseHugePages(t.narrow(0, numel / 3, numel - numel / 3));
    EXPECT_EQ(t.data_ptr(), data);
    EXPECT_EQ(t.numel(), numel);
    EXPECT_TRUE(t.equal(at::arange(numel, at::kFloat))) << numel;
  }
}

}  // namespace
}  // namespace trainsnap::testing
