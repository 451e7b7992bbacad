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

// The known sizes are bounded: past the bound the table starts afresh, so
// a size noted before is forgotten (asked of RocksDB again) and the newest
// is known; pins are not affected.
TEST(ChunkRegistryTest, KnownSizesAreBoundedAndStartAfreshPastTheBound) {
  ChunkRegistry r(/*max_known_sizes=*/3);
  r.NoteStored(H(1), 10);
  r.NoteStored(H(2), 20);
  r.NoteStored(H(3), 30);
  r.NoteStored(H(3), 31);  // an update is not a new entry
  EXPECT_EQ(r.known_sizes(), 3u);
  EXPECT_EQ(r.PinAndLookup(H(3)), std::optional<uint64_t>(31));
  r.NoteStored(H(4), 40);
  EXPECT_EQ(r.known_sizes(), 1u);
  EXPECT_FALSE(r.PinAndLookup(H(1)).has_value());
  EXPECT_EQ(r.PinAndLookup(H(4)), std::optional<uint64_t>(40));
  EXPECT_EQ(r.pinned(), 3u);  // H(3), H(1), H(4)
  EXPECT_EQ(ChunkRegistry().known_sizes(), 0u);
  EXPECT_EQ(ChunkRegistry::kDefaultMaxKnownSizes, size_t{1} << 20);
}

InFlightChunk Flight(uint8_t hash, uint32_t pack, uint64_t offset, uint8_t depth) {
  InFlightChunk c;
  c.chunk.hash = H(hash);
  c.chunk.entry.pack = pack;
  c.chunk.entry.offset = offset;
  c.chunk.entry.length = 100;
  c.chunk.entry.raw_bytes = 400;
  c.depth = depth;
  return c;
}

// The first registered copy of a hash is the one every writer gets; it
// leaves the registry with its last reference, and its pack is the oldest
// in flight while it is there.
TEST(ChunkRegistryTest, InFlightChunksKeepTheFirstCopyUntilTheLastReference) {
  ChunkRegistry r;
  EXPECT_FALSE(r.AcquireInFlight(H(1)).has_value());
  EXPECT_FALSE(r.OldestInFlightPack().has_value());

  const InFlightChunk first = Flight(1, 7, 40, 1);
  InFlightChunk got = r.RegisterInFlight(first);
  EXPECT_EQ(got.chunk.entry, first.chunk.entry);
  EXPECT_EQ(got.depth, 1);
  // A second writer's copy of the same bytes (another place, another depth).
  got = r.RegisterInFlight(Flight(1, 9, 8, 0));
  EXPECT_EQ(got.chunk.entry, first.chunk.entry);
  EXPECT_EQ(got.depth, 1);
  auto acquired = r.AcquireInFlight(H(1));
  ASSERT_TRUE(acquired.has_value());
  EXPECT_EQ(acquired->chunk.entry, first.chunk.entry);

  r.RegisterInFlight(Flight(2, 3, 8, 0));
  EXPECT_EQ(r.OldestInFlightPack(), std::optional<uint32_t>(3));
  r.ReleaseInFlight({H(2)});
  EXPECT_EQ(r.OldestInFlightPack(), std::optional<uint32_t>(7));

  r.ReleaseInFlight({H(1), H(1)});  // two of the three references
  ASSERT_TRUE(r.AcquireInFlight(H(1)).has_value());  // the third holds it (and now a fourth)
  r.ReleaseInFlight({H(1), H(1)});
  EXPECT_FALSE(r.AcquireInFlight(H(1)).has_value());
  EXPECT_FALSE(r.OldestInFlightPack().has_value());
  // Gone: the next copy registered is the first again.
  EXPECT_EQ(r.RegisterInFlight(Flight(1, 9, 8, 0)).chunk.entry.pack, 9u);
}

}  // namespace
}  // namespace trainsnap::internal
