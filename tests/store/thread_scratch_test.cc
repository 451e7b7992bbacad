#include "store/thread_scratch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace trainsnap::internal {
namespace {

// A buffer at most kKeptScratchBytes long keeps its memory for the next
// chunk; a larger one is freed when the scope that used it ends.
TEST(ScratchTrimTest, KeepsBuffersUpToTheBoundAndFreesLargerOnes) {
  std::vector<uint8_t> kept;
  {
    ScratchTrim trim(kept);
    kept.resize(kKeptScratchBytes);
  }
  EXPECT_EQ(kept.size(), kKeptScratchBytes);
  EXPECT_GE(kept.capacity(), kKeptScratchBytes);

  std::string freed;
  {
    ScratchTrim trim(freed);
    freed.resize(kKeptScratchBytes + 1, 'x');
  }
  EXPECT_EQ(freed.size(), 0u);
  EXPECT_LE(freed.capacity(), std::string().capacity());
}

}  // namespace
}  // namespace trainsnap::internal
