// Damaged packs (src/store/rocks_store_damage.cc, pack_damage.h;
// docs/reliability.md "Damaged packs"): a commit never references bytes that
// are not there, gc does what it can and names what it could not, and the
// snapshots that need lost chunks are named by step.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "store/chunk_hash.h"
#include "store/pack_set.h"
#include "store/store_test_util.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace trainsnap::testing {
namespace {

namespace fs = std::filesystem;

// Raw 4 KiB chunks: sizes are exact, and a chunk's bytes are where its
// index entry says.
StoreOptions RawChunks() {
  StoreOptions o = TestStoreOptions(/*sync=*/false);
  o.compress = false;
  return o;
}

std::string Pack(const std::string& store, uint32_t pack) {
  return store + "/" + internal::kPackDir + "/" + internal::PackFileName(pack);
}

// A pack deleted (or emptied) behind the store's back: gc succeeds and names
// the pack and the snapshots that need it; a capture of the same tensors
// writes every lost chunk again (it is not told "already stored") and reads
// back, and so does the older snapshot that shares those chunks.
TEST(DamagedPackTest, ACaptureAfterAPackVanishedWritesTheLostChunksAgain) {
  for (const bool emptied : {false, true}) {
    SCOPED_TRACE(emptied ? "pack emptied" : "pack deleted");
    TempDir dir;
    const std::string path = dir.Sub("s");
    const auto a = NormalFloats(3000, 1), b = NormalFloats(2048, 2);
    {
      auto store = Store::Open(path, RawChunks());
      ASSERT_OK(store);
      ASSERT_OK(WriteSnapshot(**store, 1, {{1, &a}, {2, &b}}));
    }
    if (emptied) {
      fs::resize_file(Pack(path, 1), 0);
    } else {
      fs::remove(Pack(path, 1));
    }
    auto store = Store::Open(path, RawChunks());
    ASSERT_OK(store);
    auto gc = (*store)->CollectGarbage();
    ASSERT_OK(gc);
    ASSERT_EQ(gc->damaged_packs.size(), 1u);
    // 8-byte pack header, then five raw chunks (16-byte header each) of
    // 12000 + 8192 bytes.
    EXPECT_EQ(gc->damaged_packs[0], emptied ? "packs/pack-00000001.pack has 0 bytes, the chunk index "
                                              "places chunks "
                                              "up to byte 20280"
                                            : "packs/pack-00000001.pack is missing");
    EXPECT_EQ(gc->damaged_steps, std::vector<int64_t>{1});
    // A reused record is refused (a capture then writes the tensor again).
    EXPECT_STATUS((*store)->Tensor(1, 1, "param"), StatusCode::kCorruption, "is damaged");
    auto info = WriteSnapshot(**store, 2, {{1, &a}, {2, &b}});
    ASSERT_OK(info);
    EXPECT_EQ(info->new_chunks, 3u + 2u);  // 12000 and 8192 bytes in 4 KiB
                                           // chunks: every one written again
    EXPECT_EQ(ReadFloats(**store, 2, 1), a);
    EXPECT_EQ(ReadFloats(**store, 2, 2), b);
    // Step 1 references the same hashes: the new copies serve it too.
    EXPECT_EQ(ReadFloats(**store, 1, 1), a);
    auto verify = (*store)->Verify();
    ASSERT_OK(verify);
    EXPECT_TRUE(verify->ok()) << verify->problems.front().status.ToString();
    auto healed = (*store)->CollectGarbage();
    ASSERT_OK(healed);
    EXPECT_TRUE(healed->damaged_packs.empty());
    EXPECT_TRUE(healed->damaged_steps.empty());
  }
}

// Within one open store: Verify finds a pack deleted under it, and the next
// capture of the same bytes writes them again instead of referencing them.
TEST(DamagedPackTest, AWriterToldByVerifyStopsDeduplicatingOntoTheLostChunks) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const auto a = NormalFloats(3000, 3);
  auto store = Store::Open(path, RawChunks());
  ASSERT_OK(store);
  ASSERT_OK(WriteSnapshot(**store, 1, {{1, &a}}));
  auto unchanged = WriteSnapshot(**store, 2, {{1, &a}});
  ASSERT_OK(unchanged);
  EXPECT_EQ(unchanged->new_chunks, 0u);  // deduplicated while the pack is whole
  fs::remove(Pack(path, 1));
  auto verify = (*store)->Verify();
  ASSERT_OK(verify);
  ASSERT_FALSE(verify->ok());
  auto again = WriteSnapshot(**store, 3, {{1, &a}});
  ASSERT_OK(again);
  EXPECT_EQ(again->new_chunks, 3u);
  for (int64_t step : {1, 2, 3}) EXPECT_EQ(ReadFloats(**store, step, 1), a) << "step " << step;
  auto clean = (*store)->Verify();
  ASSERT_OK(clean);
  EXPECT_TRUE(clean->ok());
}

// A pack cut in the middle of a live snapshot's chunk: deleting other
// snapshots and collecting garbage succeeds (it did not: compaction read the
// short chunk and failed, every time), leaves the cut pack as it is and
// names the damaged snapshot; the chunks before the cut still read.
TEST(DamagedPackTest, ATruncatedPackNoLongerBlocksGarbageCollection) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  std::vector<std::vector<float>> own;
  for (int i = 0; i < 5; ++i) own.push_back(NormalFloats(1024, 10 + i));  // one 4 KiB chunk each
  {
    auto store = Store::Open(path, RawChunks());
    ASSERT_OK(store);
    for (int i = 0; i < 5; ++i) ASSERT_OK(WriteSnapshot(**store, i + 1, {{1, &own[i]}}));
  }
  // Packs: 8-byte header, then one 16 + 4096-byte raw chunk per step. Cut
  // step 1's chunk in half: step 1 is damaged, steps 2..5 are lost whole.
  const uint64_t chunk = 16 + 4096;
  ASSERT_EQ(fs::file_size(Pack(path, 1)), 8 + 5 * chunk);
  fs::resize_file(Pack(path, 1), 8 + chunk / 2);
  auto store = Store::Open(path, RawChunks());
  ASSERT_OK(store);
  for (int64_t step = 2; step <= 5; ++step) ASSERT_OK((*store)->Delete(step));
  for (int round = 0; round < 2; ++round) {
    auto gc = (*store)->CollectGarbage();
    ASSERT_OK(gc);
    EXPECT_EQ(gc->damaged_packs, std::vector<std::string>{"packs/pack-00000001.pack has 2064 bytes, "
                                                          "the chunk index places chunks up "
                                                          "to byte 4120"});
    EXPECT_EQ(gc->damaged_steps, std::vector<int64_t>{1});
    if (round == 0) {
      EXPECT_EQ(gc->chunks_deleted, 4u);
    }
  }
  EXPECT_EQ(fs::file_size(Pack(path, 1)), 8 + chunk / 2);  // left as it is
  auto record = (*store)->Tensor(1, 1, "param");
  EXPECT_STATUS(record, StatusCode::kCorruption, "is damaged");
  // Capturing step 1's tensor again repairs step 1.
  ASSERT_OK(WriteSnapshot(**store, 6, {{1, &own[0]}}));
  EXPECT_EQ(ReadFloats(**store, 1, 1), own[0]);
  auto gc = (*store)->CollectGarbage();
  ASSERT_OK(gc);
  EXPECT_TRUE(gc->damaged_steps.empty());
}

// A delta chunk is restored by decoding its base into the destination and
// XORing the delta onto it; only the result is hashed. When a base's pack
// bytes are flipped (a raw base: its decode cannot notice), the mismatch is
// traced back and the error names the base, not the delta.
TEST(DamagedPackTest, AFlippedDeltaBaseIsNamedByTheDeltasRead) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  // One 16 KiB chunk of random bit patterns (incompressible: stored raw),
  // then the same with a few values changed (stored as a delta of it).
  std::vector<float> v0(4096), v1;
  std::mt19937 rng(9);
  for (float& x : v0) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    std::memcpy(&x, &bits, 4);
  }
  v1 = v0;
  for (size_t i = 0; i < 16; ++i) v1[i * 100] = 1.0f;
  const ChunkHash h0 = internal::HashChunk(v0.data(), v0.size() * 4);
  {
    auto store = Store::Open(path, DeltaOptions(16, DeltaReference::kKeyframe));
    ASSERT_OK(store);
    ASSERT_OK(WriteSnapshot(**store, 1, {{1, &v0}}));
    ASSERT_OK(WriteSnapshot(**store, 2, {{1, &v1}}));
    auto record = (*store)->Tensor(2, 1, "param");
    ASSERT_OK(record);
    ASSERT_EQ(record->chunks.size(), 1u);
    ASSERT_LT(record->chunks[0].stored_bytes, 4096u);  // a delta
  }
  // Flip one byte of v0's stored bytes in the pack.
  const std::string pack = Pack(path, 1);
  std::string bytes;
  {
    std::ifstream in(pack, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const size_t at = bytes.find(std::string(reinterpret_cast<const char*>(v0.data()), 64));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 1000] = static_cast<char>(bytes[at + 1000] ^ 0x10);
  {
    std::ofstream out(pack, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  auto store = Store::OpenReadOnly(path);
  ASSERT_OK(store);
  for (int64_t step : {1, 2}) {
    auto record = (*store)->Tensor(step, 1, "param");
    ASSERT_OK(record);
    std::vector<float> out(4096);
    Status s = (*store)->ReadTensor(*record, out.data(), out.size() * 4);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << "step " << step;
    // Step 2 names the delta and, last, its base as the damaged chunk.
    EXPECT_NE(s.message().find("chunk " + h0.Hex() + ": hash mismatch"), std::string::npos) << s.message();
    if (step == 2) {
      EXPECT_NE(s.message().find("): base " + h0.Hex() + ": chunk " + h0.Hex() + ": hash mismatch"),
                std::string::npos)
          << s.message();
    }
  }
}

}  // namespace
}  // namespace trainsnap::testing
