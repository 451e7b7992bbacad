#include "store/chunk_registry.h"

#include <gtest/gtest.h>

namespace trainsnap::internal {
namespace {

ChunkHash H(uint8_t v) {
  ChunkHash h;
  h.bytes[3] = v;
  return h;
}

TEST(ChunkRegistryTest, PinsAreCountedAndSpareChunksFromErase) {
  ChunkRegistry r;
  EXPECT_FALSE(r.PinAndLookup(H(1)).has_value());
  r.NoteStored(H(1), 100);
  EXPECT_EQ(r.PinAndLookup(H(1)), std::optional<uint64_t>(100));  // second pin
  EXPECT_EQ(r.pinned(), 1u);

  std::vector<ChunkHash> erased_arg;
  auto erase = [&](const std::vector<ChunkHash>& hs) {
    erased_arg = hs;
    return Status::OK();
  };
  std::vector<ChunkHash> candidates = {H(1), H(2)};
  ASSERT_TRUE(r.EraseUnpinned(&candidates, erase).ok());
  EXPECT_EQ(candidates, std::vector<ChunkHash>{H(2)});
  EXPECT_EQ(erased_arg, std::vector<ChunkHash>{H(2)});

  r.Unpin({H(1)});
  EXPECT_EQ(r.pinned(), 1u);  // still pinned once
  r.Unpin({H(1)});
  EXPECT_EQ(r.pinned(), 0u);
  candidates = {H(1)};
  ASSERT_TRUE(r.EraseUnpinned(&candidates, erase).ok());
  EXPECT_EQ(candidates, std::vector<ChunkHash>{H(1)});
  // Erased chunks are no longer known to be stored.
  EXPECT_FALSE(r.PinAndLookup(H(1)).has_value());
}

TEST(ChunkRegistryTest, FailedEraseKeepsSizes) {
  ChunkRegistry r;
  r.NoteStored(H(5), 7);
  std::vector<ChunkHash> candidates = {H(5)};
  Status s = r.EraseUnpinned(&candidates, [](const std::vector<ChunkHash>&) { return Status::IOError("disk"); });
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(r.PinAndLookup(H(5)), std::optional<uint64_t>(7));
}

}  // namespace
}  // namespace trainsnap::internal
