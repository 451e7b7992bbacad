#include "store/chunk_hash.h"

#include <gtest/gtest.h>

#include <xxhash.h>

#include <string>

namespace trainsnap::internal {
namespace {

TEST(ChunkHashTest, IsCanonicalXxh3_128) {
  const std::string data = "trainsnap chunk";
  const XXH128_hash_t expected = XXH3_128bits(data.data(), data.size());
  const ChunkHash h = HashChunk(data.data(), data.size());
  uint64_t high = 0, low = 0;
  for (int i = 0; i < 8; ++i) high = (high << 8) | h.bytes[i];
  for (int i = 8; i < 16; ++i) low = (low << 8) | h.bytes[i];
  EXPECT_EQ(high, expected.high64);
  EXPECT_EQ(low, expected.low64);
}

TEST(ChunkHashTest, HexAndEmptyInput) {
  ChunkHash h;
  for (int i = 0; i < 16; ++i) h.bytes[i] = static_cast<uint8_t>(i == 0 ? 0x9f : i);
  EXPECT_EQ(h.Hex(), "9f0102030405060708090a0b0c0d0e0f");
  const XXH128_hash_t empty = XXH3_128bits(nullptr, 0);
  const ChunkHash e = HashChunk(nullptr, 0);
  uint64_t high = 0;
  for (int i = 0; i < 8; ++i) high = (high << 8) | e.bytes[i];
  EXPECT_EQ(high, empty.high64);
  EXPECT_FALSE(HashChunk("a", 1) == HashChunk("b", 1));
}

}  // namespace
}  // namespace trainsnap::internal
