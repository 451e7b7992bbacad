#include "store/records.h"

#include <gtest/gtest.h>

#include <limits>

#include "store.pb.h"

namespace trainsnap::internal {
namespace {

TensorRecord Sample() {
  TensorRecord r;
  r.param_id = 5;
  r.role = "exp_avg";
  r.dtype = DType::kBFloat16;
  r.shape = {3, 4};
  r.bytes = 24;
  ChunkRef a, b;
  a.hash.bytes[0] = 1;
  a.raw_bytes = 16;
  a.stored_bytes = 32;
  b.hash.bytes[15] = 2;
  b.raw_bytes = 8;
  b.stored_bytes = 24;
  r.chunks = {a, b};
  return r;
}

TEST(RecordsTest, TensorRecordRoundTrip) {
  const TensorRecord r = Sample();
  auto back = ParseTensorRecord(SerializeTensorRecord(r), r.param_id, r.role);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->param_id, 5u);
  EXPECT_EQ(back->role, "exp_avg");
  EXPECT_EQ(back->dtype, DType::kBFloat16);
  EXPECT_EQ(back->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(back->bytes, 24u);
  ASSERT_EQ(back->chunks.size(), 2u);
  EXPECT_EQ(back->chunks[0].hash, r.chunks[0].hash);
  EXPECT_EQ(back->chunks[1].hash, r.chunks[1].hash);
  EXPECT_EQ(back->chunks[1].raw_bytes, 8u);
  EXPECT_EQ(back->chunks[1].stored_bytes, 24u);
}

TEST(RecordsTest, TensorRecordValidation) {
  auto corrupt = [](const proto::TensorRecordProto& p, const std::string& needle) {
    auto r = ParseTensorRecord(p.SerializeAsString(), 1, "param");
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  proto::TensorRecordProto good;
  ASSERT_TRUE(good.ParseFromString(SerializeTensorRecord(Sample())));
  auto p = good;
  p.set_dtype(0);
  corrupt(p, "unknown dtype code 0");
  p = good;
  p.set_dtype(99);
  corrupt(p, "unknown dtype code 99");
  p = good;
  p.set_shape(0, -3);
  corrupt(p, "negative dimension -3");
  p = good;
  p.set_bytes(25);
  corrupt(p, "25 bytes but shape and dtype give 24");
  p = good;
  p.clear_shape();
  p.add_shape(std::numeric_limits<int64_t>::max());
  p.add_shape(4);
  corrupt(p, "overflows");
  p = good;
  p.mutable_chunks(1)->set_raw_bytes(9);
  corrupt(p, "chunks hold 25 bytes, tensor has 24");
  p = good;
  p.mutable_chunks(0)->set_hash("short");
  corrupt(p, "not 16 bytes");
  p = good;
  p.mutable_chunks(0)->set_raw_bytes(0);
  corrupt(p, "bad chunk length");
  EXPECT_EQ(ParseTensorRecord("\xff\xff\xff", 1, "x").status().code(), StatusCode::kCorruption);
}

TEST(RecordsTest, SnapshotRecordRoundTripAndChecks) {
  SnapshotInfo info;
  info.step = -7;
  info.created_unix_ms = 1234;
  info.tensors = 2;
  info.logical_bytes = 100;
  info.chunks = 3;
  info.stored_bytes = 90;
  info.new_chunks = 1;
  info.new_bytes = 40;
  const std::string value = SerializeSnapshotRecord(info, "manifest!");
  auto back = ParseSnapshotRecord(value, -7);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->info.step, -7);
  EXPECT_EQ(back->info.created_unix_ms, 1234);
  EXPECT_EQ(back->info.tensors, 2u);
  EXPECT_EQ(back->info.logical_bytes, 100u);
  EXPECT_EQ(back->info.chunks, 3u);
  EXPECT_EQ(back->info.stored_bytes, 90u);
  EXPECT_EQ(back->info.new_chunks, 1u);
  EXPECT_EQ(back->info.new_bytes, 40u);
  EXPECT_EQ(back->info.manifest_bytes, 9u);
  EXPECT_EQ(back->manifest, "manifest!");
  EXPECT_EQ(ParseSnapshotRecord(value, 8).status().code(), StatusCode::kCorruption);

  proto::SnapshotRecord p;
  ASSERT_TRUE(p.ParseFromString(value));
  p.set_format_version(3);
  auto future = ParseSnapshotRecord(p.SerializeAsString(), -7);
  EXPECT_EQ(future.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(future.status().message().find("format version 3"), std::string::npos);
}

// Snapshot record format version 2: the records live in record groups.
TEST(RecordsTest, RecordGroupsRoundTripAndChecks) {
  TensorRecord a;
  a.param_id = 5;
  a.role = "param";
  a.dtype = DType::kFloat32;
  a.shape = {2};
  a.bytes = 8;
  a.chunks = {ChunkRef{ChunkHash{{1}}, 8, 20}};
  TensorRecord b = a;
  b.role = "exp_avg";
  b.param_id = 9;
  const std::string raw = SerializeRecordGroup({&a, &b});
  RecordGroupRef ref;
  ref.chunk.hash.bytes[0] = 7;
  ref.chunk.raw_bytes = raw.size();
  ref.chunk.stored_bytes = 30;
  ref.first_param_id = 5;
  ref.first_role = "param";
  ref.records = 2;
  auto back = ParseRecordGroup(raw, ref);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].param_id, 9u);
  EXPECT_EQ((*back)[1].role, "exp_avg");
  EXPECT_EQ((*back)[1].chunks[0].hash, a.chunks[0].hash);
  RecordGroupRef wrong_count = ref;
  wrong_count.records = 3;
  EXPECT_EQ(ParseRecordGroup(raw, wrong_count).status().code(), StatusCode::kCorruption);
  RecordGroupRef wrong_first = ref;
  wrong_first.first_role = "grad";
  EXPECT_EQ(ParseRecordGroup(raw, wrong_first).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(ParseRecordGroup(SerializeRecordGroup({&b, &a}), ref).status().code(), StatusCode::kCorruption);

  SnapshotInfo info;
  info.step = 3;
  info.tensors = 2;
  std::vector<RecordGroupRef> groups = {ref};
  const std::string value = SerializeSnapshotRecord(info, "m", &groups);
  auto data = ParseSnapshotRecord(value, 3);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_TRUE(data->grouped);
  ASSERT_EQ(data->groups.size(), 1u);
  EXPECT_EQ(data->groups[0].chunk.hash, ref.chunk.hash);
  EXPECT_EQ(data->groups[0].chunk.raw_bytes, raw.size());
  EXPECT_EQ(data->groups[0].first_role, "param");
  info.tensors = 3;  // the groups hold 2 records
  EXPECT_EQ(ParseSnapshotRecord(SerializeSnapshotRecord(info, "m", &groups), 3).status().code(),
            StatusCode::kCorruption);
  proto::SnapshotRecord p;
  ASSERT_TRUE(p.ParseFromString(value));
  p.set_format_version(1);  // version 1 with groups
  EXPECT_EQ(ParseSnapshotRecord(p.SerializeAsString(), 3).status().code(), StatusCode::kCorruption);

  // Sizes a damaged record could claim are refused before a reader
  // allocates for them (a std::length_error or bad_alloc would escape).
  info.tensors = kMaxGroupRecords + 1;
  std::vector<RecordGroupRef> too_many = {ref};
  too_many[0].records = kMaxGroupRecords + 1;
  auto many = ParseSnapshotRecord(SerializeSnapshotRecord(info, "m", &too_many), 3);
  EXPECT_EQ(many.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(many.status().message(), "record group " + ref.chunk.hash.Hex() + ": 257 records in " +
                                         std::to_string(raw.size()) + " bytes, above the bounds (256, 268435456)");
  info.tensors = 2;
  std::vector<RecordGroupRef> too_large = {ref};
  too_large[0].chunk.raw_bytes = uint64_t{1} << 62;
  EXPECT_EQ(ParseSnapshotRecord(SerializeSnapshotRecord(info, "m", &too_large), 3).status().code(),
            StatusCode::kCorruption);
  too_large[0].chunk.raw_bytes = kMaxRecordGroupBytes;  // at the bound: accepted
  EXPECT_TRUE(ParseSnapshotRecord(SerializeSnapshotRecord(info, "m", &too_large), 3).ok());
}

// A snapshot record's shared manifest: inline bytes or one chunk reference,
// never both; a chunk reference's size is bounded before anything is
// allocated for it.
TEST(RecordsTest, SharedManifestRoundTripAndChecks) {
  SnapshotInfo info;
  info.step = 4;
  SharedManifestRef inline_ref;
  inline_ref.inline_bytes = "layout";
  auto small = ParseSnapshotRecord(SerializeSnapshotRecord(info, "own", nullptr, &inline_ref), 4);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_EQ(small->shared.inline_bytes, "layout");
  EXPECT_FALSE(small->shared.chunk.has_value());
  EXPECT_EQ(small->info.manifest_bytes, 3u + 6u);

  SharedManifestRef chunk_ref;
  ChunkRef c;
  c.hash.bytes.fill(0xab);
  c.raw_bytes = 5000;
  c.stored_bytes = 1200;
  chunk_ref.chunk = c;
  const std::string value = SerializeSnapshotRecord(info, "own", nullptr, &chunk_ref);
  auto big = ParseSnapshotRecord(value, 4);
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  ASSERT_TRUE(big->shared.chunk.has_value());
  EXPECT_EQ(big->shared.chunk->hash, c.hash);
  EXPECT_EQ(big->shared.chunk->raw_bytes, 5000u);
  EXPECT_EQ(big->shared.chunk->stored_bytes, 1200u);
  EXPECT_EQ(big->shared.inline_bytes, "");
  EXPECT_EQ(big->info.manifest_bytes, 3u);
  // The reference costs field 8's tag and length (2), the hash (2 + 16),
  // raw_bytes 5000 and stored_bytes 1200 (1 + 2 each, varints).
  EXPECT_EQ(value.size(), SerializeSnapshotRecord(info, "own").size() + 2 + 18 + 3 + 3);

  proto::SnapshotRecord p;
  ASSERT_TRUE(p.ParseFromString(value));
  proto::SnapshotRecord both = p;
  both.set_shared_manifest("x");
  auto parsed = ParseSnapshotRecord(both.SerializeAsString(), 4);
  EXPECT_EQ(parsed.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(parsed.status().message(), "shared manifest both inline and in a chunk");
  proto::SnapshotRecord short_hash = p;
  short_hash.mutable_shared_manifest_chunk()->set_hash("abc");
  parsed = ParseSnapshotRecord(short_hash.SerializeAsString(), 4);
  EXPECT_EQ(parsed.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(parsed.status().message(), "shared manifest: chunk hash is not 16 bytes");
  proto::SnapshotRecord huge = p;
  huge.mutable_shared_manifest_chunk()->set_raw_bytes(kMaxRecordGroupBytes + 1);
  parsed = ParseSnapshotRecord(huge.SerializeAsString(), 4);
  EXPECT_EQ(parsed.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(parsed.status().message(), "shared manifest " + c.hash.Hex() + ": 268435457 bytes, outside 1..268435456");
  proto::SnapshotRecord empty = p;
  empty.mutable_shared_manifest_chunk()->set_raw_bytes(0);
  parsed = ParseSnapshotRecord(empty.SerializeAsString(), 4);
  EXPECT_EQ(parsed.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(parsed.status().message(), "shared manifest " + c.hash.Hex() + ": 0 bytes, outside 1..268435456");
}

}  // namespace
}  // namespace trainsnap::internal
