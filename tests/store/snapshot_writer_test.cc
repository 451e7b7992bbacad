#include "store/snapshot_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "raw_db.h"
#include "store/chunk_codec.h"
#include "store/chunk_hash.h"
#include "store/pack_entry.h"
#include "store/pack_set.h"
#include "store/keys.h"
#include "store/records.h"
#include "manifest.pb.h"
#include "store.pb.h"
#include "store_test_util.h"
#include "testing/adam_manifest.h"
#include "testing/temp_dir.h"
#include "torch/manifest_codec.h"
#include "torch/manifest_format.h"
#include "trainsnap/store.h"

namespace trainsnap {
namespace {

using namespace trainsnap::testing;

TEST(SnapshotWriterTest, AddTensorValidates) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(store.ok());
  auto writer = (*store)->BeginSnapshot(1);
  ASSERT_TRUE(writer.ok());
  auto a = NormalFloats(4, 7);
  TensorView v = View(1, "param", a);
  v.size_bytes = 12;
  EXPECT_EQ((*writer)->AddTensor(v).code(), StatusCode::kInvalidArgument);
  v = View(1, "param", a);
  v.dtype = DType::kUnknown;
  EXPECT_EQ((*writer)->AddTensor(v).code(), StatusCode::kInvalidArgument);
  v = View(1, "param", a);
  v.shape = {-1, -4};
  EXPECT_EQ((*writer)->AddTensor(v).code(), StatusCode::kInvalidArgument);
  v = View(1, "", a);
  EXPECT_EQ((*writer)->AddTensor(v).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE((*writer)->AddTensor(View(1, "param", a)).ok());
  Status dup = (*writer)->AddTensor(View(1, "param", a));
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.message().find("added twice"), std::string::npos) << dup.message();
  ASSERT_TRUE((*writer)->AddTensor(View(1, "exp_avg", a)).ok());
  auto info = (*writer)->Commit();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->tensors, 2u);
  EXPECT_EQ((*writer)->Commit().status().code(), StatusCode::kInvalidArgument);
}

TEST(SnapshotWriterTest, EmptyTensorsAndManifest) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(store.ok());
  auto writer = (*store)->BeginSnapshot(1);
  ASSERT_TRUE(writer.ok());
  TensorView empty;
  empty.param_id = 9;
  empty.role = "grad";
  empty.dtype = DType::kBFloat16;
  empty.shape = {0, 7};
  ASSERT_TRUE((*writer)->AddTensor(empty).ok());
  TensorView scalar;
  int64_t value = -42;
  scalar.param_id = 9;
  scalar.role = "step";
  scalar.dtype = DType::kInt64;
  scalar.shape = {};
  scalar.data = &value;
  scalar.size_bytes = 8;
  ASSERT_TRUE((*writer)->AddTensor(scalar).ok());
  auto info = (*writer)->Commit();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->manifest_bytes, 0u);
  EXPECT_EQ(info->chunks, 1u);
  auto record = (*store)->Tensor(1, 9, "grad");
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->bytes, 0u);
  EXPECT_EQ(record->shape, (std::vector<int64_t>{0, 7}));
  EXPECT_TRUE(record->chunks.empty());
  EXPECT_TRUE((*store)->ReadTensor(*record, nullptr, 0).ok());
  auto s = (*store)->Tensor(1, 9, "step");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->shape.empty());
  int64_t back = 0;
  ASSERT_TRUE((*store)->ReadTensor(*s, &back, 8).ok());
  EXPECT_EQ(back, -42);
  EXPECT_EQ((*store)->ReadTensor(*s, &back, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->Manifest(1).value(), "");
}

TEST(SnapshotWriterTest, ConcurrentAddTensor) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(store.ok());
  std::vector<std::vector<float>> data;
  for (int i = 0; i < 8; ++i) data.push_back(NormalFloats(3000, 100 + i % 4));  // pairs share content
  auto writer = (*store)->BeginSnapshot(1);
  ASSERT_TRUE(writer.ok());
  std::vector<std::thread> threads;
  std::vector<Status> results(data.size());
  for (size_t i = 0; i < data.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = (*writer)->AddTensor(View(i, "param", data[i])); });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  auto info = (*writer)->Commit();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->chunks, 8u * 3u);
  EXPECT_EQ(info->new_chunks, 4u * 3u);  // 4 distinct contents of 3 chunks each
  for (size_t i = 0; i < data.size(); ++i) EXPECT_EQ(ReadFloats(**store, 1, i), data[i]);
}


// --- delta chunks (docs/format.md, "Delta chunks") ---------------------------

// The chain tests below use DeltaReference::kParent (chains of any depth);
// the kKeyframe tests say so.
// Chain depth of every chunk of (step, param_id, "param"), read from the
// chunk headers of the closed store.
std::vector<int> ChunkDepths(const std::string& path, int64_t step, uint64_t param_id) {
  std::vector<int> depths;
  std::vector<ChunkHash> hashes;
  {
    auto store = Store::OpenReadOnly(path);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (!store.ok()) return depths;
    auto record = (*store)->Tensor(step, param_id, "param");
    EXPECT_TRUE(record.ok());
    if (!record.ok()) return depths;
    for (const ChunkRef& c : record->chunks) hashes.push_back(c.hash);
  }
  RawDb raw(path);
  EXPECT_TRUE(raw.ok()) << raw.error();
  for (const ChunkHash& h : hashes) {
    std::string value;
    EXPECT_TRUE(raw.GetChunk(h, &value).ok());
    auto header = internal::ParseChunkHeader(value);
    EXPECT_TRUE(header.ok());
    depths.push_back(header.ok() && header->filter == internal::ChunkFilter::kXorDelta ? header->delta_depth : 0);
  }
  return depths;
}

size_t ChunkDepsEntries(const std::string& path) {
  RawDb raw(path);
  EXPECT_TRUE(raw.ok()) << raw.error();
  size_t n = 0;
  std::unique_ptr<rocksdb::Iterator> it(raw.db()->NewIterator(rocksdb::ReadOptions(), raw.chunk_deps()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) ++n;
  return n;
}

TEST(SnapshotWriterDeltaTest, ChainsAreBoundedByTheKeyframeIntervalAndRestoreBitExact) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  std::vector<std::vector<float>> versions = {NormalFloats(16384, 1)};
  for (int i = 1; i < 10; ++i) versions.push_back(Evolve(versions.back(), 1, 100 + i));
  std::vector<uint64_t> new_bytes;
  {
    auto store = Store::Open(path, DeltaOptions(4));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (int i = 0; i < 10; ++i) {
      auto info = WriteSnapshot(**store, i + 1, {{1, &versions[i]}});
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      EXPECT_EQ(info->new_chunks, 4u);
      new_bytes.push_back(info->new_bytes);
    }
    for (int i = 0; i < 10; ++i) EXPECT_EQ(ReadFloats(**store, i + 1, 1), versions[i]) << "step " << i + 1;
    auto verify = (*store)->Verify();
    ASSERT_TRUE(verify.ok());
    EXPECT_TRUE(verify->ok()) << verify->problems[0].status.ToString();
    EXPECT_EQ(verify->chunks, 40u);
  }
  // Keyframes at snapshots 1, 5, 9; deltas (smaller) in between.
  for (int i = 0; i < 10; ++i) {
    const int depth = i % 4;
    EXPECT_EQ(ChunkDepths(path, i + 1, 1), std::vector<int>(4, depth)) << "step " << i + 1;
    if (depth > 0) {
      EXPECT_LT(new_bytes[i] * 10, new_bytes[0] * 7) << new_bytes[i] << " vs " << new_bytes[0];
    }
  }
  EXPECT_EQ(ChunkDepsEntries(path), 4u * 7);  // one per delta chunk
}

TEST(SnapshotWriterDeltaTest, KeyframeReferenceDeltasAreOneLevelAgainstTheLastKeyframe) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  std::vector<std::vector<float>> versions = {NormalFloats(16384, 1)};
  for (int i = 1; i < 10; ++i) versions.push_back(Evolve(versions.back(), 1, 100 + i));
  std::vector<std::vector<ChunkHash>> hashes;
  std::vector<uint64_t> new_bytes;
  {
    auto store = Store::Open(path, DeltaOptions(4, DeltaReference::kKeyframe));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (int i = 0; i < 10; ++i) {
      auto info = WriteSnapshot(**store, i + 1, {{1, &versions[i]}});
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      EXPECT_EQ(info->new_chunks, 4u);
      new_bytes.push_back(info->new_bytes);
      auto record = (*store)->Tensor(i + 1, 1, "param");
      ASSERT_TRUE(record.ok());
      std::vector<ChunkHash> h;
      for (const ChunkRef& c : record->chunks) h.push_back(c.hash);
      hashes.push_back(h);
    }
    for (int i = 0; i < 10; ++i) EXPECT_EQ(ReadFloats(**store, i + 1, 1), versions[i]) << "step " << i + 1;
    auto verify = (*store)->Verify();
    ASSERT_TRUE(verify.ok());
    EXPECT_TRUE(verify->ok()) << verify->problems[0].status.ToString();
  }
  // Keyframes at snapshots 1, 5, 9; the three snapshots after each are
  // deltas of depth 1 whose base is that keyframe's chunk.
  RawDb raw(path);
  ASSERT_TRUE(raw.ok()) << raw.error();
  for (int i = 0; i < 10; ++i) {
    const bool keyframe = i % 4 == 0;
    const int keyframe_index = i - i % 4;
    for (size_t c = 0; c < 4; ++c) {
      std::string value;
      rocksdb::Status got =
          raw.GetChunk(hashes[i][c], &value);
      ASSERT_TRUE(got.ok()) << got.ToString() << " step " << i + 1 << " chunk " << c;
      auto header = internal::ParseChunkHeader(value);
      ASSERT_TRUE(header.ok());
      if (keyframe) {
        EXPECT_NE(header->filter, internal::ChunkFilter::kXorDelta) << "step " << i + 1;
        continue;
      }
      ASSERT_EQ(header->filter, internal::ChunkFilter::kXorDelta) << "step " << i + 1;
      EXPECT_EQ(header->delta_depth, 1) << "step " << i + 1;
      EXPECT_EQ(header->base, hashes[keyframe_index][c]) << "step " << i + 1 << " chunk " << c;
    }
    if (!keyframe) {
      EXPECT_LT(new_bytes[i] * 10, new_bytes[0] * 8) << new_bytes[i] << " vs " << new_bytes[0];
    }
  }
}

TEST(SnapshotWriterDeltaTest, KeyframeReferenceGcKeepsOnlyTheKeyframe) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  std::vector<std::vector<float>> versions = {NormalFloats(16384, 4)};
  for (int i = 1; i < 6; ++i) versions.push_back(Evolve(versions.back(), 1, 200 + i));
  auto store = Store::Open(path, DeltaOptions(16, DeltaReference::kKeyframe));
  ASSERT_TRUE(store.ok());
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(WriteSnapshot(**store, i + 1, {{1, &versions[i]}}).ok());
  for (int step = 1; step <= 5; ++step) ASSERT_TRUE((*store)->Delete(step).ok());
  auto gc = (*store)->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->chunks_deleted, 16u);  // the deltas of steps 2..5
  EXPECT_EQ(gc->chunks_live, 8u);      // step 6's deltas and their base, step 1's keyframe
  EXPECT_EQ(ReadFloats(**store, 6, 1), versions[5]);
  auto verify = (*store)->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok());
}

TEST(SnapshotWriterDeltaTest, KeyframeIntervalOneWritesNoDeltas) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  auto a = NormalFloats(16384, 2);
  auto b = Evolve(a, 1, 3);
  {
    auto store = Store::Open(path, DeltaOptions(1));
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &a}}).ok());
    ASSERT_TRUE(WriteSnapshot(**store, 2, {{1, &b}}).ok());
    EXPECT_EQ(ReadFloats(**store, 2, 1), b);
  }
  EXPECT_EQ(ChunkDepths(path, 2, 1), std::vector<int>(4, 0));
  EXPECT_EQ(ChunkDepsEntries(path), 0u);
  StoreOptions bad = DeltaOptions(256);
  EXPECT_EQ(Store::Open(dir.Sub("t"), bad).status().code(), StatusCode::kInvalidArgument);
}

// Tensors under 4 KiB get deltas too: from kMinDeltaBytes
// (128) on, when the delta with its 48 fixed bytes (base hash, chunk_deps
// entry) is smaller. Exact stored bytes: the writer's encodings, recomputed.
TEST(SnapshotWriterDeltaTest, SmallTensorsGetDeltasWhenTheyPay) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const auto small_a = NormalFloats(256, 11);  // 1 KiB: one chunk
  const auto small_b = Evolve(small_a, 1, 12);
  const auto tiny_a = NormalFloats(16, 13);  // 64 bytes: below kMinDeltaBytes
  const auto tiny_b = Evolve(tiny_a, 1, 14);
  internal::ChunkEncodeOptions o;
  o.zstd_level = StoreOptions().zstd_level;
  o.element_size = 4;
  std::string small_plain, small_delta, tiny_plain_a, tiny_plain_b;
  ASSERT_TRUE(internal::EncodeChunk(small_a.data(), 1024, o, &small_plain).ok());
  ASSERT_TRUE(internal::EncodeChunk(tiny_a.data(), 64, o, &tiny_plain_a).ok());
  ASSERT_TRUE(internal::EncodeChunk(tiny_b.data(), 64, o, &tiny_plain_b).ok());
  ChunkHash small_a_hash;
  {
    auto store = Store::Open(path, DeltaOptions(16, DeltaReference::kKeyframe));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto first = WriteSnapshot(**store, 1, {{1, &small_a}, {2, &tiny_a}});
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    EXPECT_EQ(first->new_chunks, 2u);
    EXPECT_EQ(first->new_bytes, small_plain.size() + tiny_plain_a.size());
    auto record = (*store)->Tensor(1, 1, "param");
    ASSERT_TRUE(record.ok());
    ASSERT_EQ(record->chunks.size(), 1u);
    small_a_hash = record->chunks[0].hash;
    ASSERT_TRUE(internal::EncodeDeltaChunk(small_b.data(), small_a.data(), 1024, small_a_hash, 0, o, &small_delta).ok());
    // What the trial saw: the delta with its fixed bytes beats the plain chunk.
    ASSERT_LT(small_delta.size() + 2 * sizeof(ChunkHash), small_plain.size());

    auto second = WriteSnapshot(**store, 2, {{1, &small_b}, {2, &tiny_b}});
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    EXPECT_EQ(second->new_chunks, 2u);
    EXPECT_EQ(second->new_bytes, small_delta.size() + tiny_plain_b.size());
    EXPECT_EQ(second->stored_bytes, small_delta.size() + tiny_plain_b.size());
    EXPECT_EQ(ReadFloats(**store, 1, 1), small_a);
    EXPECT_EQ(ReadFloats(**store, 2, 1), small_b);
    EXPECT_EQ(ReadFloats(**store, 2, 2), tiny_b);
    auto verify = (*store)->Verify();
    ASSERT_TRUE(verify.ok());
    EXPECT_TRUE(verify->ok()) << verify->problems[0].status.ToString();
  }
  EXPECT_EQ(ChunkDepths(path, 2, 1), std::vector<int>{1});
  EXPECT_EQ(ChunkDepths(path, 2, 2), std::vector<int>{0});
  EXPECT_EQ(ChunkDepsEntries(path), 1u);
}

// A delta that saves less than kMinDeltaSaving (20 %) of the plain
// encoding's estimate is not written: the chunk is stored plain and becomes
// the next keyframe, against which the next version's delta is taken. The
// premise (a delta that would save 0-20 %) is checked with the writer's
// own estimate.
TEST(SnapshotWriterDeltaTest, ADeltaSavingLittleIsWrittenPlainAsTheNextKeyframe) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const auto a = NormalFloats(4096, 21);  // 16 KiB: one chunk
  // Four values in five replaced: their XOR with `a` is noise, the rest zero.
  auto b = a;
  const auto fresh = NormalFloats(4096, 22);
  for (size_t i = 0; i < b.size(); ++i) {
    if (i % 5 != 0) b[i] = fresh[i];
  }
  const auto c = Evolve(b, 1, 23);
  internal::ChunkEncodeOptions o;
  o.zstd_level = StoreOptions().zstd_level;
  o.element_size = 4;
  const size_t bytes = b.size() * sizeof(float);
  const size_t plain = internal::EstimateEncodedSize(b.data(), nullptr, bytes, o);
  const size_t delta = internal::EstimateEncodedSize(b.data(), a.data(), bytes, o) + 3 * sizeof(ChunkHash);
  ASSERT_LT(delta, plain);
  ASSERT_GT(static_cast<double>(delta), (1.0 - internal::kMinDeltaSaving) * static_cast<double>(plain))
      << delta << " vs " << plain;
  std::vector<ChunkHash> hashes;
  {
    auto store = Store::Open(path, DeltaOptions(16, DeltaReference::kKeyframe));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    const std::vector<float>* versions[] = {&a, &b, &c};
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(WriteSnapshot(**store, i + 1, {{1, versions[i]}}).ok());
      auto record = (*store)->Tensor(i + 1, 1, "param");
      ASSERT_TRUE(record.ok());
      ASSERT_EQ(record->chunks.size(), 1u);
      hashes.push_back(record->chunks[0].hash);
    }
    for (int i = 0; i < 3; ++i) EXPECT_EQ(ReadFloats(**store, i + 1, 1), *versions[i]) << "step " << i + 1;
  }
  EXPECT_EQ(ChunkDepths(path, 2, 1), std::vector<int>{0});
  EXPECT_EQ(ChunkDepths(path, 3, 1), std::vector<int>{1});
  EXPECT_EQ(ChunkDepsEntries(path), 1u);
  RawDb raw(path);
  ASSERT_TRUE(raw.ok()) << raw.error();
  std::string value;
  ASSERT_TRUE(raw.GetChunk(hashes[2], &value).ok());
  auto header = internal::ParseChunkHeader(value);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->base, hashes[1]);  // step 2's plain chunk, not step 1's
}

TEST(SnapshotWriterDeltaTest, GcKeepsEveryBaseALiveChunkNeeds) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  std::vector<std::vector<float>> versions = {NormalFloats(16384, 4)};
  for (int i = 1; i < 6; ++i) versions.push_back(Evolve(versions.back(), 1, 200 + i));
  {
    auto store = Store::Open(path, DeltaOptions(16));
    ASSERT_TRUE(store.ok());
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(WriteSnapshot(**store, i + 1, {{1, &versions[i]}}).ok());
    for (int step = 1; step <= 5; ++step) ASSERT_TRUE((*store)->Delete(step).ok());
    auto gc = (*store)->CollectGarbage();
    ASSERT_TRUE(gc.ok()) << gc.status().ToString();
    EXPECT_EQ(gc->chunks_deleted, 0u);  // step 6's chains reach back to step 1
    EXPECT_EQ(gc->chunks_live, 24u);
    EXPECT_EQ(ReadFloats(**store, 6, 1), versions[5]);
    auto verify = (*store)->Verify();
    ASSERT_TRUE(verify.ok());
    EXPECT_TRUE(verify->ok());
    auto stats = (*store)->Stats();
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->collectable_chunks, 0u);
    // Once nothing needs them, the whole chains go, with their chunk_deps.
    ASSERT_TRUE((*store)->Delete(6).ok());
    gc = (*store)->CollectGarbage();
    ASSERT_TRUE(gc.ok());
    EXPECT_EQ(gc->chunks_deleted, 24u);
    EXPECT_EQ(gc->chunks_live, 0u);
  }
  EXPECT_EQ(ChunkDepsEntries(path), 0u);
}

TEST(SnapshotWriterDeltaTest, RetentionCollectsWholeChainsIncrementally) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  StoreOptions o = DeltaOptions(3);
  o.retention.keep_last = 2;
  std::vector<std::vector<float>> versions = {NormalFloats(16384, 5)};
  for (int i = 1; i < 9; ++i) versions.push_back(Evolve(versions.back(), 1, 300 + i));
  auto store = Store::Open(path, o);
  ASSERT_TRUE(store.ok());
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(WriteSnapshot(**store, i + 1, {{1, &versions[i]}}).ok());
  // Depths of steps 8 and 9: 1 and 2 (keyframe at step 7), so step 7's
  // chunks stay though step 7 is pruned; steps 1..6 are garbage.
  auto list = (*store)->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ(ReadFloats(**store, 8, 1), versions[7]);
  EXPECT_EQ(ReadFloats(**store, 9, 1), versions[8]);
  auto stats = (*store)->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->chunks, 12u);
  EXPECT_EQ(stats->collectable_chunks, 0u);
}

TEST(SnapshotWriterDeltaTest, MissingBaseIsCorruptionNamingTheBase) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  auto a = NormalFloats(16384, 6);
  auto b = Evolve(a, 1, 7);
  ChunkHash base;
  {
    auto store = Store::Open(path, DeltaOptions(16));
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &a}}).ok());
    ASSERT_TRUE(WriteSnapshot(**store, 2, {{1, &b}}).ok());
    base = (*store)->Tensor(1, 1, "param")->chunks[0].hash;
  }
  {
    RawDb raw(path);
    ASSERT_TRUE(raw.ok());
    ASSERT_TRUE(raw.db()->Delete(rocksdb::WriteOptions(), raw.chunks(), internal::EncodeChunkKey(base)).ok());
  }
  auto store = Store::Open(path, DeltaOptions(16));
  ASSERT_TRUE(store.ok());
  auto record = (*store)->Tensor(2, 1, "param");
  ASSERT_TRUE(record.ok());
  std::vector<float> out(b.size());
  Status s = (*store)->ReadTensor(*record, out.data(), record->bytes);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("base " + base.Hex() + ": missing from the store"), std::string::npos) << s.message();
  auto verify = (*store)->Verify(2);
  ASSERT_TRUE(verify.ok());
  ASSERT_EQ(verify->problems.size(), 1u);
  EXPECT_EQ(verify->problems[0].chunk_index, 0);
  EXPECT_EQ(verify->problems[0].status.code(), StatusCode::kCorruption);
  // Chunks 1..3 decode fine.
  EXPECT_EQ(verify->bytes, 3u * 16384);
}

TEST(SnapshotWriterDeltaTest, Bf16UsesTheFloat16Split) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  auto f = NormalFloats(8192, 8);
  std::vector<uint16_t> bf16(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &f[i], 4);
    bf16[i] = static_cast<uint16_t>(bits >> 16);
  }
  ChunkHash first;
  {
    auto store = Store::Open(path, DeltaOptions(16));
    ASSERT_TRUE(store.ok());
    auto writer = (*store)->BeginSnapshot(1);
    ASSERT_TRUE(writer.ok());
    TensorView v;
    v.param_id = 1;
    v.role = "param";
    v.dtype = DType::kBFloat16;
    v.shape = {8192};
    v.data = bf16.data();
    v.size_bytes = bf16.size() * 2;
    ASSERT_TRUE((*writer)->AddTensor(v).ok());
    ASSERT_TRUE((*writer)->Commit().ok());
    auto record = (*store)->Tensor(1, 1, "param");
    ASSERT_TRUE(record.ok());
    std::vector<uint16_t> out(bf16.size());
    ASSERT_TRUE((*store)->ReadTensor(*record, out.data(), out.size() * 2).ok());
    EXPECT_EQ(out, bf16);
    first = record->chunks[0].hash;
  }
  RawDb raw(path);
  ASSERT_TRUE(raw.ok());
  std::string value;
  ASSERT_TRUE(raw.GetChunk(first, &value).ok());
  auto header = internal::ParseChunkHeader(value);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->filter, internal::ChunkFilter::kFloat16Split);
}

// --- AddUnchangedTensor ---------------------------------------------------------

// --- record groups (docs/format.md, "Record groups") -------------------------

// Snapshot record of `step` as stored, parsed.
internal::SnapshotRecordData StoredSnapshotRecord(RawDb& raw, int64_t step, std::string* value) {
  EXPECT_TRUE(raw.db()->Get(rocksdb::ReadOptions(), raw.snapshots(), internal::EncodeStepKey(step), value).ok());
  auto data = internal::ParseSnapshotRecord(*value, step);
  EXPECT_TRUE(data.ok()) << data.status().ToString();
  return data.ok() ? *data : internal::SnapshotRecordData();
}

// 5,000 tensors of which 3 change per snapshot: each
// later snapshot's metadata is its snapshot record plus the few record
// groups that changed, far below one record per tensor; every snapshot
// reads back bitwise; deleting the base keeps the later ones whole; verify
// names a damaged group shared by several snapshots, and GC refuses.
TEST(SnapshotWriterGroupsTest, UnchangedRecordsAreNotRepeatedAndSurviveTheirFirstSnapshot) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  constexpr int kTensors = 5000;
  constexpr int kSnapshots = 4;
  std::vector<std::vector<std::vector<float>>> versions(kSnapshots);  // [snapshot][tensor]
  versions[0].reserve(kTensors);
  for (int t = 0; t < kTensors; ++t) versions[0].push_back(NormalFloats(16, 1000 + t));
  for (int i = 1; i < kSnapshots; ++i) {
    versions[i] = versions[i - 1];
    for (int k = 0; k < 3; ++k) versions[i][(i * 997 + k * 1601) % kTensors][0] += 1.f;
  }
  std::vector<uint64_t> metadata(kSnapshots);
  uint64_t per_tensor_records = 0;  // what format version 1 writes: a key and value per tensor
  {
    auto store = Store::Open(path, DeltaOptions(16, DeltaReference::kKeyframe));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (int i = 0; i < kSnapshots; ++i) {
      auto writer = (*store)->BeginSnapshot(i + 1);
      ASSERT_TRUE(writer.ok());
      for (int t = 0; t < kTensors; ++t) ASSERT_TRUE((*writer)->AddTensor(View(t + 1, "param", versions[i][t])).ok());
      (*writer)->SetManifest("m");
      auto info = (*writer)->Commit();
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      EXPECT_EQ(info->tensors, static_cast<uint64_t>(kTensors));
      metadata[i] = static_cast<internal::SnapshotWriterImpl&>(**writer).metadata_bytes();
    }
    auto records = (*store)->Tensors(kSnapshots);
    ASSERT_TRUE(records.ok()) << records.status().ToString();
    ASSERT_EQ(records->size(), static_cast<size_t>(kTensors));
    for (const TensorRecord& r : *records) {
      per_tensor_records +=
          internal::EncodeTensorKey(kSnapshots, r.param_id, r.role).size() + internal::SerializeTensorRecord(r).size();
    }
  }
  {
    RawDb raw(path);
    ASSERT_TRUE(raw.ok()) << raw.error();
    std::string meta;
    ASSERT_TRUE(raw.db()->Get(rocksdb::ReadOptions(), raw.meta(), "store", &meta).ok());
    proto::StoreMeta m;
    ASSERT_TRUE(m.ParseFromString(meta));
    EXPECT_EQ(m.format_version(), 7u);
    std::unique_ptr<rocksdb::Iterator> it(raw.db()->NewIterator(rocksdb::ReadOptions(), raw.tensors()));
    it->SeekToFirst();
    EXPECT_FALSE(it->Valid());  // no per-tensor records
    // Exact: the snapshot record (key and value) plus the groups no earlier
    // snapshot holds; later snapshots write at most one group per change.
    std::set<ChunkHash> earlier;
    for (int i = 0; i < kSnapshots; ++i) {
      std::string value;
      const internal::SnapshotRecordData data = StoredSnapshotRecord(raw, i + 1, &value);
      ASSERT_TRUE(data.grouped);
      uint64_t expected = 8 + value.size();
      size_t new_groups = 0;
      uint64_t records = 0;
      for (const internal::RecordGroupRef& g : data.groups) {
        records += g.records;
        if (earlier.insert(g.chunk.hash).second) {
          expected += g.chunk.stored_bytes;
          ++new_groups;
        }
      }
      EXPECT_EQ(records, static_cast<uint64_t>(kTensors));
      EXPECT_EQ(metadata[i], expected) << "snapshot " << i + 1;
      if (i > 0) {
        EXPECT_LE(new_groups, 3u) << "snapshot " << i + 1;
        EXPECT_LT(metadata[i] * 20, per_tensor_records) << metadata[i] << " vs " << per_tensor_records;
      }
    }
  }
  auto store = Store::Open(path, DeltaOptions(16, DeltaReference::kKeyframe));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto read_all = [&](int i) {
    auto records = (*store)->Tensors(i + 1);
    ASSERT_TRUE(records.ok()) << records.status().ToString();
    ASSERT_EQ(records->size(), static_cast<size_t>(kTensors));
    for (const TensorRecord& r : *records) {
      std::vector<float> out(16);
      ASSERT_TRUE((*store)->ReadTensor(r, out.data(), 64).ok());
      ASSERT_EQ(out, versions[i][r.param_id - 1]) << "snapshot " << i + 1 << " tensor " << r.param_id;
    }
  };
  for (int i = 0; i < kSnapshots; ++i) read_all(i);
  // A point look-up finds its record through the groups.
  auto one = (*store)->Tensor(3, 4321, "param");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(ReadFloats(**store, 3, 4321), versions[2][4320]);
  EXPECT_EQ((*store)->Tensor(3, 4321, "grad").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*store)->Tensor(3, kTensors + 1, "param").status().code(), StatusCode::kNotFound);

  // The base snapshot goes; its groups stay live for the later snapshots.
  ASSERT_TRUE((*store)->Delete(1).ok());
  auto gc = (*store)->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  // Step 1's versions of the 3 tensors step 2 changed, and the 3 groups that
  // held their step-1 records (each change fell in another group).
  EXPECT_EQ(gc->chunks_deleted, 6u);
  for (int i = 1; i < kSnapshots; ++i) read_all(i);
  auto verify = (*store)->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok()) << verify->problems[0].status.ToString();
  EXPECT_EQ(verify->tensors, static_cast<uint64_t>(kTensors) * (kSnapshots - 1));
  // Look-ups of one snapshot are served from a cache that a delete resets.
  ASSERT_TRUE((*store)->Tensor(4, 4321, "param").ok());
  ASSERT_TRUE((*store)->Delete(4).ok());
  EXPECT_EQ((*store)->Tensor(4, 4321, "param").status().code(), StatusCode::kNotFound);
  store->reset();

  // Damage a group that snapshots 2 and 3 share: verify names it in each.
  ChunkHash shared;
  {
    RawDb raw(path);
    ASSERT_TRUE(raw.ok()) << raw.error();
    std::string v2, v3;
    const auto d2 = StoredSnapshotRecord(raw, 2, &v2);
    const auto d3 = StoredSnapshotRecord(raw, 3, &v3);
    std::set<ChunkHash> in3;
    for (const auto& g : d3.groups) in3.insert(g.chunk.hash);
    bool found = false;
    for (const auto& g : d2.groups) {
      if (in3.count(g.chunk.hash)) {
        shared = g.chunk.hash;
        found = true;
        break;
      }
    }
    ASSERT_TRUE(found);
    raw.FlipChunkByte(shared, 20);
  }
  store = Store::Open(path, DeltaOptions(16, DeltaReference::kKeyframe));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  verify = (*store)->Verify();
  ASSERT_TRUE(verify.ok());
  std::vector<int64_t> steps;
  for (const VerifyProblem& p : verify->problems) {
    EXPECT_EQ(p.hash, shared);
    EXPECT_EQ(p.status.code(), StatusCode::kCorruption) << p.status.ToString();
    EXPECT_NE(p.status.message().find("record group " + shared.Hex()), std::string::npos) << p.status.ToString();
    steps.push_back(p.step);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ((*store)->Tensor(2, 4321, "param").status().code(), StatusCode::kCorruption);
  // A collection that cannot read a group refuses: it might reference anything.
  EXPECT_EQ((*store)->CollectGarbage().status().code(), StatusCode::kCorruption);
}


// A store of small snapshots keeps the per-tensor layout (snapshot format
// 1); its first snapshot of 256 tensors or more is grouped (snapshot format
// 2). The store's format version (6) is the same for both. Both layouts
// read back, collect and verify in one store.
TEST(SnapshotWriterGroupsTest, SmallSnapshotsKeepVersionOneAndMixWithGroupedOnes) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  auto meta_version = [&]() -> uint32_t {
    RawDb raw(path);
    EXPECT_TRUE(raw.ok()) << raw.error();
    std::string meta;
    EXPECT_TRUE(raw.db()->Get(rocksdb::ReadOptions(), raw.meta(), "store", &meta).ok());
    proto::StoreMeta m;
    EXPECT_TRUE(m.ParseFromString(meta));
    return m.format_version();
  };
  std::vector<std::vector<float>> small(255), large(256);
  for (size_t t = 0; t < small.size(); ++t) small[t] = NormalFloats(4, 50 + t);
  for (size_t t = 0; t < large.size(); ++t) large[t] = NormalFloats(4, 500 + t);
  auto write = [&](Store& store, int64_t step, const std::vector<std::vector<float>>& tensors) {
    auto writer = store.BeginSnapshot(step);
    ASSERT_TRUE(writer.ok());
    for (size_t t = 0; t < tensors.size(); ++t) ASSERT_TRUE((*writer)->AddTensor(View(t + 1, "param", tensors[t])).ok());
    ASSERT_TRUE((*writer)->Commit().ok());
  };
  {
    auto store = Store::Open(path, DeltaOptions(16, DeltaReference::kKeyframe));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    write(**store, 1, small);
  }
  EXPECT_EQ(meta_version(), 7u);
  {
    RawDb raw(path);
    ASSERT_TRUE(raw.ok()) << raw.error();
    std::string value;
    EXPECT_FALSE(StoredSnapshotRecord(raw, 1, &value).grouped);
  }
  {
    auto store = Store::Open(path, DeltaOptions(16, DeltaReference::kKeyframe));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    write(**store, 2, large);
  }
  EXPECT_EQ(meta_version(), 7u);
  {
    RawDb raw(path);
    ASSERT_TRUE(raw.ok()) << raw.error();
    std::string value;
    EXPECT_TRUE(StoredSnapshotRecord(raw, 2, &value).grouped);
  }
  auto store = Store::OpenReadOnly(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  for (size_t t = 0; t < small.size(); ++t) ASSERT_EQ(ReadFloats(**store, 1, t + 1), small[t]) << t;
  for (size_t t = 0; t < large.size(); ++t) ASSERT_EQ(ReadFloats(**store, 2, t + 1), large[t]) << t;
  store->reset();
  auto writable = Store::Open(path, DeltaOptions(16, DeltaReference::kKeyframe));
  ASSERT_TRUE(writable.ok()) << writable.status().ToString();
  auto gc = (*writable)->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->chunks_deleted, 0u);
  auto verify = (*writable)->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok()) << verify->problems[0].status.ToString();
  EXPECT_EQ(verify->tensors, 511u);
}

TEST(SnapshotWriterUnchangedTest, ReusesTheRecordWithoutWritingAndSurvivesGc) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(store.ok());
  auto frozen = NormalFloats(5000, 9);
  auto trained = NormalFloats(3000, 10);
  ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &frozen}, {2, &trained}}).ok());
  auto trained2 = NormalFloats(3000, 11);
  auto writer = (*store)->BeginSnapshot(2);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->AddUnchangedTensor(1, "param", 1).ok());
  ASSERT_TRUE((*writer)->AddTensor(View(2, "param", trained2)).ok());
  Status dup = (*writer)->AddUnchangedTensor(1, "param", 1);
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  auto info = (*writer)->Commit();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  writer->reset();
  auto trained_record = (*store)->Tensor(2, 2, "param");
  ASSERT_TRUE(trained_record.ok());
  uint64_t trained_bytes = 0;
  for (const ChunkRef& c : trained_record->chunks) trained_bytes += c.stored_bytes;
  EXPECT_EQ(info->new_bytes, trained_bytes);  // the frozen tensor cost nothing
  EXPECT_EQ(info->tensors, 2u);
  EXPECT_EQ(info->logical_bytes, (5000u + 3000u) * 4);
  auto before = (*store)->Tensor(1, 1, "param");
  auto after = (*store)->Tensor(2, 1, "param");
  ASSERT_TRUE(before.ok() && after.ok());
  ASSERT_EQ(after->chunks.size(), before->chunks.size());
  for (size_t i = 0; i < after->chunks.size(); ++i) EXPECT_EQ(after->chunks[i].hash, before->chunks[i].hash);
  EXPECT_EQ(after->shape, before->shape);
  ASSERT_TRUE((*store)->Delete(1).ok());
  ASSERT_TRUE((*store)->CollectGarbage().ok());
  EXPECT_EQ(ReadFloats(**store, 2, 1), frozen);
  EXPECT_EQ(ReadFloats(**store, 2, 2), trained2);
}

TEST(SnapshotWriterUnchangedTest, MissingSourceIsNotFoundAndAbortsTheCommit) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(store.ok());
  auto a = NormalFloats(100, 12);
  ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &a}}).ok());
  auto writer = (*store)->BeginSnapshot(2);
  ASSERT_TRUE(writer.ok());
  Status s = (*writer)->AddUnchangedTensor(7, "param", 1);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("unchanged since step 1"), std::string::npos) << s.message();
  EXPECT_EQ((*writer)->AddUnchangedTensor(1, "param", 5).code(), StatusCode::kNotFound);
  EXPECT_EQ((*writer)->AddUnchangedTensor(1, "", 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*writer)->Commit().status().code(), StatusCode::kAborted);
  EXPECT_EQ((*store)->Info(2).status().code(), StatusCode::kNotFound);
}

// AddTensorRecord reuses a record read earlier, even after the snapshot it
// came from is deleted, as long as its chunks are stored; once they are
// collected it is NotFound and the commit is refused.
TEST(SnapshotWriterUnchangedTest, RecordOutlivesItsSnapshotButNotItsChunks) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(store.ok());
  auto frozen = NormalFloats(5000, 13);
  ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &frozen}}).ok());
  auto record = (*store)->Tensor(1, 1, "param");
  ASSERT_TRUE(record.ok());
  {
    auto writer = (*store)->BeginSnapshot(2);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->AddTensorRecord(*record).ok());
    ASSERT_TRUE((*store)->Delete(1).ok());
    auto gc = (*store)->CollectGarbage();  // the writer's pins keep the chunks
    ASSERT_TRUE(gc.ok());
    EXPECT_EQ(gc->chunks_deleted, 0u);
    auto info = (*writer)->Commit();
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->new_bytes, 0u);
    EXPECT_EQ(info->logical_bytes, 5000u * 4);
  }
  EXPECT_EQ(ReadFloats(**store, 2, 1), frozen);

  TensorRecord bad = *record;
  bad.bytes += 4;
  auto writer = (*store)->BeginSnapshot(3);
  ASSERT_TRUE(writer.ok());
  EXPECT_EQ((*writer)->AddTensorRecord(bad).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE((*store)->Delete(2).ok());
  ASSERT_TRUE((*store)->CollectGarbage().ok());
  Status gone = (*writer)->AddTensorRecord(*record);
  EXPECT_EQ(gone.code(), StatusCode::kNotFound) << gone.ToString();
  EXPECT_NE(gone.message().find("is no longer stored"), std::string::npos) << gone.message();
  EXPECT_EQ((*writer)->Commit().status().code(), StatusCode::kAborted);
}

// --- shared manifests (docs/format.md, "Shared manifests") --------------------

std::string SharedBytes(size_t n, int seed) {
  std::string out;
  out.reserve(n);
  for (size_t i = 0; out.size() < n; ++i) out += "layers." + std::to_string(i * 7 + seed) + ".weight;";
  out.resize(n);
  return out;
}

Result<SnapshotInfo> CommitShared(Store& store, int64_t step, const std::vector<float>& tensor,
                                  const std::string& shared, uint64_t* metadata = nullptr) {
  TRAINSNAP_ASSIGN_OR_RETURN(auto writer, store.BeginSnapshot(step));
  TRAINSNAP_RETURN_IF_ERROR(writer->AddTensor(View(1, "param", tensor)));
  writer->SetManifest("own" + std::to_string(step));
  writer->SetSharedManifest(shared);
  auto info = writer->Commit();
  if (metadata != nullptr) *metadata = static_cast<internal::SnapshotWriterImpl&>(*writer).metadata_bytes();
  return info;
}

internal::PackEntry IndexEntry(RawDb& raw, const ChunkHash& hash) {
  std::string value;
  EXPECT_TRUE(raw.db()->Get(rocksdb::ReadOptions(), raw.chunks(), internal::EncodeChunkKey(hash), &value).ok());
  auto entry = internal::ParsePackEntry(value);
  EXPECT_TRUE(entry.ok()) << entry.status().ToString();
  return entry.ok() ? *entry : internal::PackEntry();
}

// A shared manifest of 4 KiB or more is one chunk in the packs that every
// snapshot with equal bytes references: the second snapshot's metadata is
// exactly its tensor record and snapshot record; smaller ones stay inline.
// A byte flipped in the chunk's pack bytes is Corruption naming it, and a
// Verify problem of each snapshot that references it.
TEST(SnapshotWriterSharedManifestTest, StoredOnceInThePacksAndAFlippedByteIsFound) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const std::string layout = SharedBytes(100000, 1);
  const std::string other = SharedBytes(100000, 2);
  const std::string small = SharedBytes(4095, 3);
  auto a = NormalFloats(16, 1);
  std::vector<uint64_t> metadata(5);
  {
    auto store = Store::Open(path, SmallChunks());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto first = CommitShared(**store, 1, a, small, &metadata[1]);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    EXPECT_EQ(first->manifest_bytes, 4u + 4095u);  // inline: counted as repeated
    for (int64_t step : {2, 3, 4}) {
      auto info = CommitShared(**store, step, a, step == 4 ? other : layout, &metadata[step]);
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      EXPECT_EQ(info->manifest_bytes, 4u);
      EXPECT_EQ(info->new_chunks, 0u);  // the tensor's chunk is step 1's; metadata is not counted here
    }
    for (int64_t step : {1, 2, 3, 4}) {
      auto got = (*store)->SharedManifest(step);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(*got, step == 1 ? small : step == 4 ? other : layout) << step;
      EXPECT_EQ(*(*store)->Manifest(step), "own" + std::to_string(step));
    }
    EXPECT_EQ((*store)->SharedManifest(9).status().code(), StatusCode::kNotFound);
    // Through the Store API alone: no shared manifest, empty bytes.
    ASSERT_TRUE(WriteSnapshot(**store, 5, {{1, &a}}).ok());
    EXPECT_EQ(*(*store)->SharedManifest(5), "");
  }
  ChunkHash other_hash;
  internal::PackEntry other_entry;
  {
    RawDb raw(path);
    ASSERT_TRUE(raw.ok()) << raw.error();
    std::string v[5];
    internal::SnapshotRecordData d[5];
    for (int step = 1; step <= 4; ++step) d[step] = StoredSnapshotRecord(raw, step, &v[step]);
    EXPECT_FALSE(d[1].shared.chunk.has_value());
    EXPECT_EQ(d[1].shared.inline_bytes, small);
    ASSERT_TRUE(d[2].shared.chunk && d[3].shared.chunk && d[4].shared.chunk);
    EXPECT_EQ(d[3].shared.chunk->hash, d[2].shared.chunk->hash);
    EXPECT_EQ(d[2].shared.chunk->hash, internal::HashChunk(reinterpret_cast<const uint8_t*>(layout.data()), layout.size()));
    EXPECT_EQ(d[2].shared.chunk->raw_bytes, 100000u);
    EXPECT_LT(d[2].shared.chunk->stored_bytes, 100000u);  // compressed
    other_hash = d[4].shared.chunk->hash;
    // The chunk is in a pack file; the chunks CF holds its 28-byte index entry.
    const internal::PackEntry entry = IndexEntry(raw, d[2].shared.chunk->hash);
    EXPECT_EQ(entry.length, d[2].shared.chunk->stored_bytes);
    EXPECT_EQ(entry.raw_bytes, 100000u);
    other_entry = IndexEntry(raw, other_hash);
    // Exact metadata: the tensor record (one, snapshot format 1) + the
    // snapshot record; the shared chunk only where it was new.
    auto tensor_record = [&](int64_t step) {
      std::string value;
      EXPECT_TRUE(raw.db()->Get(rocksdb::ReadOptions(), raw.tensors(), internal::EncodeTensorKey(step, 1, "param"),
                                &value).ok());
      return internal::EncodeTensorKey(step, 1, "param").size() + value.size();
    };
    EXPECT_EQ(metadata[1], tensor_record(1) + 8 + v[1].size());
    EXPECT_EQ(metadata[2], tensor_record(2) + 8 + v[2].size() + d[2].shared.chunk->stored_bytes);
    EXPECT_EQ(metadata[3], tensor_record(3) + 8 + v[3].size());  // the layout again: no chunk
    EXPECT_EQ(metadata[4], tensor_record(4) + 8 + v[4].size() + d[4].shared.chunk->stored_bytes);
    // The chunk reference costs the record field 8's tag and length (2),
    // the hash (2 + 16), raw_bytes 100000 (1 + 3) and stored_bytes (1 + its
    // varint); inline bytes cost themselves plus field 7's tag and length (3).
    const uint64_t stored = d[3].shared.chunk->stored_bytes;
    const size_t stored_varint = stored < (1u << 7) ? 1 : stored < (1u << 14) ? 2 : stored < (1u << 21) ? 3 : 4;
    EXPECT_EQ(v[3].size(), internal::SerializeSnapshotRecord(d[3].info, "own3").size() + 2 + 18 + 4 + 1 + stored_varint);
    EXPECT_EQ(v[1].size(), internal::SerializeSnapshotRecord(d[1].info, "own1").size() + 3u + 4095u);
  }
  {
    // Flip the last byte of the other layout's chunk in its pack file.
    const std::string pack = path + "/" + internal::kPackDir + "/" + internal::PackFileName(other_entry.pack);
    std::fstream f(pack, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.is_open()) << pack;
    f.seekg(static_cast<std::streamoff>(other_entry.end() - 1));
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x01);
    f.seekp(static_cast<std::streamoff>(other_entry.end() - 1));
    f.write(&byte, 1);
    ASSERT_TRUE(f.good());
  }
  auto store = Store::Open(path, SmallChunks());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Status damaged = (*store)->SharedManifest(4).status();
  EXPECT_EQ(damaged.code(), StatusCode::kCorruption);
  EXPECT_NE(damaged.message().find("step 4: shared manifest " + other_hash.Hex()), std::string::npos)
      << damaged.ToString();
  EXPECT_EQ(*(*store)->SharedManifest(3), layout);  // the other chunk is intact
  auto verify = (*store)->Verify();
  ASSERT_TRUE(verify.ok()) << verify.status().ToString();
  ASSERT_EQ(verify->problems.size(), 1u);
  EXPECT_EQ(verify->problems[0].step, 4);
  EXPECT_FALSE(verify->problems[0].store);
  EXPECT_EQ(verify->problems[0].hash, other_hash);
  EXPECT_EQ(verify->problems[0].status.code(), StatusCode::kCorruption);
  EXPECT_NE(verify->problems[0].status.message().find("step 4: shared manifest " + other_hash.Hex()),
            std::string::npos)
      << verify->problems[0].status.ToString();
  verify = (*store)->Verify(4);
  ASSERT_TRUE(verify.ok());
  EXPECT_EQ(verify->problems.size(), 1u);
  verify = (*store)->Verify(3);
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok());
}

// The shared manifest's chunk lives while a snapshot references it:
// compaction moves it with the other live chunks of a sparse pack, and it
// is collected (exactly it) when its last snapshot is deleted. StoreStats
// counts it live, then collectable.
TEST(SnapshotWriterSharedManifestTest, LiveThroughCompactionCollectedWithItsLastSnapshot) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const std::string layout = SharedBytes(100000, 1);
  const std::string next_layout = SharedBytes(100000, 2);
  auto big = NormalFloats(50000, 1);  // 49 incompressible chunks, deleted with step 1
  auto small = NormalFloats(16, 2);
  auto store = Store::Open(path, SmallChunks());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE(CommitShared(**store, 1, big, layout).ok());
  ASSERT_TRUE(CommitShared(**store, 2, small, layout).ok());
  ASSERT_TRUE(CommitShared(**store, 3, small, next_layout).ok());
  const ChunkHash layout_hash = internal::HashChunk(reinterpret_cast<const uint8_t*>(layout.data()), layout.size());
  ASSERT_TRUE((*store)->Delete(1).ok());
  auto stats = (*store)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->collectable_chunks, 49u);  // step 1's tensor only
  auto gc = (*store)->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->chunks_deleted, 49u);
  EXPECT_EQ(gc->chunks_live, 3u);  // the small tensor's chunk and both layouts
  // The one pack was mostly garbage: its live chunks, the layouts among
  // them, were copied to a new pack.
  EXPECT_EQ(gc->packs_removed, 1u);
  stats = (*store)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->chunks, 3u);
  EXPECT_EQ(gc->pack_bytes_rewritten, stats->chunk_stored_bytes);
  EXPECT_EQ(stats->collectable_chunks, 0u);
  EXPECT_EQ(*(*store)->SharedManifest(2), layout);
  auto verify = (*store)->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok()) << verify->problems[0].status.ToString();

  // Step 2 was the layout's last snapshot: its chunk, and only it, goes.
  auto before = (*store)->Stats();
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE((*store)->Delete(2).ok());
  stats = (*store)->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->collectable_chunks, 1u);
  gc = (*store)->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->chunks_deleted, 1u);
  stats = (*store)->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(gc->bytes_deleted, before->chunk_stored_bytes - stats->chunk_stored_bytes);
  EXPECT_EQ(stats->chunks, 2u);
  EXPECT_EQ(*(*store)->SharedManifest(3), next_layout);
  EXPECT_EQ(ReadFloats(**store, 3, 1), small);
  store->reset();
  RawDb raw(path);
  ASSERT_TRUE(raw.ok()) << raw.error();
  std::string value;
  EXPECT_TRUE(raw.db()->Get(rocksdb::ReadOptions(), raw.chunks(), internal::EncodeChunkKey(layout_hash), &value)
                  .IsNotFound());
}

// Retention's incremental collection takes a pruned snapshot's shared
// manifest chunk as a candidate: a layout no kept snapshot uses is gone
// after the commit that pruned its last snapshot, a shared one stays.
TEST(SnapshotWriterSharedManifestTest, RetentionCollectsALayoutNoKeptSnapshotUses) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  StoreOptions options = SmallChunks();
  options.retention.keep_last = 1;
  const std::string first = SharedBytes(20000, 1);
  const std::string second = SharedBytes(20000, 2);
  auto a = NormalFloats(16, 1);
  {
    auto store = Store::Open(path, options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (int64_t step : {1, 2, 3}) {
      ASSERT_TRUE(CommitShared(**store, step, a, step < 3 ? first : second).ok());
      if (step == 2) {
        EXPECT_EQ(*(*store)->SharedManifest(2), first);  // step 1 pruned, its layout kept
      }
    }
    EXPECT_EQ(*(*store)->SharedManifest(3), second);
    auto list = (*store)->List();
    ASSERT_TRUE(list.ok());
    ASSERT_EQ(list->size(), 1u);
  }
  RawDb raw(path);
  ASSERT_TRUE(raw.ok()) << raw.error();
  std::set<std::string> keys;
  std::unique_ptr<rocksdb::Iterator> it(raw.db()->NewIterator(rocksdb::ReadOptions(), raw.chunks()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) keys.insert(it->key().ToString());
  // The tensor's chunk and step 3's layout; step 1 and 2's layout is gone.
  EXPECT_EQ(keys.size(), 2u);
  std::string v3;
  const auto d3 = StoredSnapshotRecord(raw, 3, &v3);
  ASSERT_TRUE(d3.shared.chunk);
  EXPECT_EQ(keys.count(internal::EncodeChunkKey(d3.shared.chunk->hash)), 1u);
}

// A shared manifest above 256 MiB is refused by the commit, nothing stored.
TEST(SnapshotWriterSharedManifestTest, AboveTheBoundIsInvalidArgument) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto writer = (*store)->BeginSnapshot(1);
  ASSERT_TRUE(writer.ok());
  (*writer)->SetSharedManifest(std::string(internal::kMaxRecordGroupBytes + 1, 'x'));
  auto info = (*writer)->Commit();
  EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(info.status().message(), "commit: shared manifest of 268435457 bytes, above 268435456");
  EXPECT_EQ((*store)->Info(1).status().code(), StatusCode::kNotFound);
}

// Issue 18, item 4: a second snapshot of an unchanged 50,000-tensor layout in
// which 3 tensors changed adds exactly its snapshot record, the 3 tensor
// chunks and the 3 record groups that hold their records; the 3.3 MB layout
// is not written again, and the snapshot record repeats 49 bytes of manifest.
TEST(SnapshotWriterSharedManifestTest, UnchangedFiftyThousandTensorLayoutAddsOnlyWhatChanged) {
  constexpr int kParams = 50000;
  TempDir dir;
  const std::string path = dir.Sub("s");
  std::vector<std::vector<float>> values(kParams, std::vector<float>(16, 0.5f));
  for (int i = 0; i < kParams; ++i) values[i][0] = static_cast<float>(i);  // distinct chunks
  std::vector<uint64_t> metadata;
  std::vector<SnapshotInfo> infos;
  std::vector<StoreStats> stats;
  std::string layout;
  {
    auto store = Store::Open(path, SmallChunks());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (int64_t step : {1, 2}) {
      if (step == 2) {
        for (int i : {7, 25000, 49999}) values[i][3] += 1.f;  // three tensors change
      }
      auto encoded = internal::EncodeManifest(AdamManifest(kParams, step, step == 1 ? 1e-3 : 9e-4));
      ASSERT_TRUE(encoded.ok()) << encoded.status().ToString();
      if (step == 1) layout = encoded->layout;
      EXPECT_EQ(encoded->layout, layout);
      auto writer = (*store)->BeginSnapshot(step);
      ASSERT_TRUE(writer.ok());
      for (int i = 0; i < kParams; ++i) {
        ASSERT_TRUE((*writer)->AddTensor(View(0x1000 + static_cast<uint64_t>(i), "param", values[i])).ok());
      }
      (*writer)->SetManifest(encoded->own);
      (*writer)->SetSharedManifest(encoded->layout);
      auto info = (*writer)->Commit();
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      infos.push_back(*info);
      metadata.push_back(static_cast<internal::SnapshotWriterImpl&>(**writer).metadata_bytes());
      auto s = (*store)->Stats();
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      stats.push_back(*s);
    }
    auto joined = internal::DecodeManifest(*(*store)->Manifest(2), *(*store)->SharedManifest(2));
    ASSERT_TRUE(joined.ok()) << joined.status().ToString();
    EXPECT_EQ(joined->params_size(), kParams);
    EXPECT_EQ(joined->step(), 2);
    EXPECT_EQ(joined->optimizers(0).groups(0).options().lr(), 9e-4);
  }
  EXPECT_EQ(layout.size(), 3302048u);
  EXPECT_EQ(infos[0].manifest_bytes, 49u);
  EXPECT_EQ(infos[1].manifest_bytes, 49u);
  EXPECT_EQ(infos[1].new_chunks, 3u);
  RawDb raw(path);
  ASSERT_TRUE(raw.ok()) << raw.error();
  std::string v1, v2;
  const internal::SnapshotRecordData d1 = StoredSnapshotRecord(raw, 1, &v1);
  const internal::SnapshotRecordData d2 = StoredSnapshotRecord(raw, 2, &v2);
  ASSERT_TRUE(d1.shared.chunk && d2.shared.chunk);
  EXPECT_EQ(d2.shared.chunk->hash, d1.shared.chunk->hash);
  std::set<ChunkHash> first_groups;
  uint64_t first_group_bytes = 0;
  for (const internal::RecordGroupRef& g : d1.groups) {
    if (first_groups.insert(g.chunk.hash).second) first_group_bytes += g.chunk.stored_bytes;
  }
  uint64_t new_group_bytes = 0;
  size_t new_groups = 0;
  for (const internal::RecordGroupRef& g : d2.groups) {
    if (first_groups.count(g.chunk.hash) == 0) {
      ++new_groups;
      new_group_bytes += g.chunk.stored_bytes;
    }
  }
  EXPECT_EQ(new_groups, 3u);
  // Exact: the first snapshot wrote the layout's chunk and every group; the
  // second its snapshot record and the 3 changed groups.
  EXPECT_EQ(metadata[0], 8 + v1.size() + first_group_bytes + d1.shared.chunk->stored_bytes);
  EXPECT_EQ(metadata[1], 8 + v2.size() + new_group_bytes);
  // The store grew by exactly the 3 tensor chunks and the 3 groups.
  EXPECT_EQ(stats[1].chunks - stats[0].chunks, 6u);
  EXPECT_EQ(stats[1].chunk_stored_bytes - stats[0].chunk_stored_bytes, infos[1].new_bytes + new_group_bytes);
  std::cout << "50k tensors: snapshot 1 metadata " << metadata[0] << " B (layout chunk "
            << d1.shared.chunk->stored_bytes << " B of " << layout.size() << ", " << d1.groups.size()
            << " record groups " << first_group_bytes << " B, snapshot record " << v1.size()
            << " B); snapshot 2 metadata " << metadata[1] << " B (snapshot record " << v2.size() << " B, "
            << new_groups << " new groups " << new_group_bytes << " B)\n";
}

}  // namespace
}  // namespace trainsnap
