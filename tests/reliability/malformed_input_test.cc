// Malformed input to the store API and to its record parsers: bad tensor
// views from a caller, and bad values written straight into the column
// families of a closed store (as a bug, a foreign tool or a bad disk would).
// Every case is a typed error with the exact code; nothing crashes, and no
// damaged record leads GC to delete a chunk a snapshot may need.
#include <gtest/gtest.h>

#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "reliability/reliability_util.h"
#include "store.pb.h"
#include "store/chunk_codec.h"
#include "store/keys.h"
#include "store/records.h"
#include "testing/temp_dir.h"

namespace trainsnap::testing {
namespace {

using internal::EncodeChunkKey;
using internal::EncodeStepKey;
using internal::EncodeTensorKey;

TensorView ViewOf(uint64_t id, DType dtype, std::vector<int64_t> shape, const void* data, size_t size) {
  return TensorView{id, "param", dtype, std::move(shape), data, size, {}};
}

TEST(MalformedInputTest, BadTensorViewsAreInvalidArgument) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), TestStoreOptions());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto writer = (*store)->BeginSnapshot(1);
  ASSERT_TRUE(writer.ok());
  std::vector<uint8_t> buf(64, 7);
  auto code = [&](const TensorView& v) { return (*writer)->AddTensor(v).code(); };
  EXPECT_EQ(code(ViewOf(1, DType::kUnknown, {4}, buf.data(), 16)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(ViewOf(2, static_cast<DType>(99), {4}, buf.data(), 16)), StatusCode::kInvalidArgument);
  // shape x itemsize != length, both ways.
  EXPECT_EQ(code(ViewOf(3, DType::kFloat32, {4}, buf.data(), 15)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(ViewOf(4, DType::kFloat32, {4}, buf.data(), 17)), StatusCode::kInvalidArgument);
  // Dimensions whose product overflows 64 bits, and a negative one.
  EXPECT_EQ(code(ViewOf(5, DType::kFloat64, {INT64_C(1) << 40, INT64_C(1) << 40}, buf.data(), 8)),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(ViewOf(6, DType::kFloat32, {INT64_MAX, 2}, buf.data(), 8)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(ViewOf(7, DType::kFloat32, {-4}, buf.data(), 16)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(ViewOf(8, DType::kFloat32, {4}, nullptr, 16)), StatusCode::kInvalidArgument);
  TensorView no_role = ViewOf(9, DType::kFloat32, {4}, buf.data(), 16);
  no_role.role.clear();
  EXPECT_EQ(code(no_role), StatusCode::kInvalidArgument);
  // Twice the same (param_id, role).
  EXPECT_EQ(code(ViewOf(10, DType::kFloat32, {4}, buf.data(), 16)), StatusCode::kOk);
  EXPECT_EQ(code(ViewOf(10, DType::kFloat32, {4}, buf.data(), 16)), StatusCode::kInvalidArgument);
  // None of the bad tensors poisoned the snapshot; the good one commits.
  auto info = (*writer)->Commit();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->tensors, 1u);
  EXPECT_EQ((*writer)->Commit().status().code(), StatusCode::kInvalidArgument);  // committed twice
  EXPECT_EQ(code(ViewOf(11, DType::kFloat32, {4}, buf.data(), 16)), StatusCode::kInvalidArgument);
  // Reading into a buffer of the wrong size.
  auto record = (*store)->Tensor(1, 10, "param");
  ASSERT_TRUE(record.ok());
  EXPECT_EQ((*store)->ReadTensor(*record, buf.data(), 15).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->Tensor(1, 11, "param").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*store)->Info(2).status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*store)->Delete(2).code(), StatusCode::kNotFound);
  EXPECT_EQ((*store)->Rollback(2).code(), StatusCode::kNotFound);
}

TEST(MalformedInputTest, ZeroSizeAndZeroDimTensorsRoundTrip) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), TestStoreOptions());
  ASSERT_TRUE(store.ok());
  const double scalar = 3.25;
  const int32_t nothing = 0;
  {
    auto writer = (*store)->BeginSnapshot(1);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->AddTensor(ViewOf(1, DType::kFloat64, {}, &scalar, 8)).ok());         // 0-dim
    ASSERT_TRUE((*writer)->AddTensor(ViewOf(2, DType::kFloat32, {0}, nullptr, 0)).ok());       // empty
    ASSERT_TRUE((*writer)->AddTensor(ViewOf(3, DType::kInt32, {3, 0, 5}, &nothing, 0)).ok());  // empty 3-d
    ASSERT_TRUE((*writer)->Commit().ok());
  }
  auto records = (*store)->Tensors(1);
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 3u);
  EXPECT_EQ((*records)[0].shape, std::vector<int64_t>{});
  EXPECT_EQ((*records)[0].bytes, 8u);
  double back = 0;
  ASSERT_TRUE((*store)->ReadTensor((*records)[0], &back, 8).ok());
  EXPECT_EQ(std::memcmp(&back, &scalar, 8), 0);
  EXPECT_EQ((*records)[1].bytes, 0u);
  EXPECT_EQ((*records)[1].chunks.size(), 0u);
  EXPECT_TRUE((*store)->ReadTensor((*records)[1], nullptr, 0).ok());
  EXPECT_EQ((*records)[2].shape, (std::vector<int64_t>{3, 0, 5}));
  EXPECT_TRUE((*store)->ReadTensor((*records)[2], nullptr, 0).ok());
  auto verify = (*store)->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok());
}

TEST(MalformedInputTest, NegativeExtremeAndDuplicateSteps) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), TestStoreOptions());
  ASSERT_TRUE(store.ok());
  for (int64_t step : {int64_t{5}, int64_t{-3}, INT64_MIN, INT64_MAX, int64_t{0}}) {
    ASSERT_TRUE(WriteStep(**store, step).ok()) << step;
  }
  EXPECT_EQ(WriteStep(**store, 5).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(WriteStep(**store, INT64_MIN).code(), StatusCode::kAlreadyExists);
  // Numeric order, negative steps first; the duplicates changed nothing.
  EXPECT_TRUE(StoreHoldsExactly(**store, {INT64_MIN, -3, 0, 5, INT64_MAX}));
  ASSERT_TRUE((*store)->Rollback(-3).ok());
  EXPECT_TRUE(StoreHoldsExactly(**store, {INT64_MIN, -3}));
}

// A store with steps 1 and 2, closed; each test then damages one record.
class MalformedRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.Sub("s");
    auto store = Store::Open(path_, TestStoreOptions());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE(WriteStep(**store, 1).ok());
    ASSERT_TRUE(WriteStep(**store, 2).ok());
    auto records = (*store)->Tensors(2);
    ASSERT_TRUE(records.ok());
    record_ = (*records)[0];  // param 1: a 4096 B chunk and a 1904 B tail
    ASSERT_EQ(record_.chunks.size(), 2u);
  }
  void Put(const std::string& cf, const std::string& key, const std::string& value) {
    RawWrite(path_, cf, key, &value);
  }
  std::unique_ptr<Store> OpenOk() {
    auto store = Store::Open(path_, TestStoreOptions());
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }
  proto::TensorRecordProto RecordProto() {
    proto::TensorRecordProto p;
    EXPECT_TRUE(p.ParseFromString(internal::SerializeTensorRecord(record_)));
    return p;
  }
  // Step 2's record of param 1 replaced by `p`: reading it is a Corruption,
  // step 1 stays intact, Verify reports it, and GC refuses to run rather than
  // delete chunks that the damaged record may reference.
  void ExpectDamagedTensorRecord(const std::string& value) {
    Put("tensors", EncodeTensorKey(2, 1, "param"), value);
    auto store = OpenOk();
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->Tensors(2).status().code(), StatusCode::kCorruption);
    EXPECT_EQ(store->Tensor(2, 1, "param").status().code(), StatusCode::kCorruption);
    EXPECT_TRUE(StepIsIntact(*store, 1));
    auto verify = store->Verify();
    ASSERT_TRUE(verify.ok()) << verify.status().ToString();
    ASSERT_EQ(verify->problems.size(), 1u);
    EXPECT_EQ(verify->problems[0].step, 2);
    EXPECT_EQ(verify->problems[0].status.code(), StatusCode::kCorruption);
    auto gc = store->CollectGarbage();
    EXPECT_EQ(gc.status().code(), StatusCode::kCorruption);
    EXPECT_TRUE(StepIsIntact(*store, 1));
  }

  TempDir dir_;
  std::string path_;
  TensorRecord record_;
};

TEST_F(MalformedRecordTest, GarbageTensorRecord) { ExpectDamagedTensorRecord("\xff\xff\xff garbage"); }

TEST_F(MalformedRecordTest, TruncatedTensorRecord) {
  const std::string full = internal::SerializeTensorRecord(record_);
  ExpectDamagedTensorRecord(full.substr(0, full.size() - 5));
}

TEST_F(MalformedRecordTest, UnknownDtypeInRecord) {
  auto p = RecordProto();
  p.set_dtype(99);
  ExpectDamagedTensorRecord(p.SerializeAsString());
}

TEST_F(MalformedRecordTest, ShapeTimesItemSizeDiffersFromLength) {
  auto p = RecordProto();
  p.set_shape(0, 1499);
  ExpectDamagedTensorRecord(p.SerializeAsString());
}

TEST_F(MalformedRecordTest, OverflowingAndNegativeDimensions) {
  auto p = RecordProto();
  p.clear_shape();
  p.add_shape(INT64_C(1) << 40);
  p.add_shape(INT64_C(1) << 40);
  ExpectDamagedTensorRecord(p.SerializeAsString());
}

TEST_F(MalformedRecordTest, NegativeDimension) {
  auto p = RecordProto();
  p.set_shape(0, -1500);
  ExpectDamagedTensorRecord(p.SerializeAsString());
}

TEST_F(MalformedRecordTest, ShortChunkHash) {
  auto p = RecordProto();
  p.mutable_chunks(0)->set_hash(std::string(15, 'x'));
  ExpectDamagedTensorRecord(p.SerializeAsString());
}

TEST_F(MalformedRecordTest, ChunkLengthsDoNotAddUp) {
  auto p = RecordProto();
  p.mutable_chunks(1)->set_raw_bytes(p.chunks(1).raw_bytes() + 4);
  ExpectDamagedTensorRecord(p.SerializeAsString());
}

TEST_F(MalformedRecordTest, RecordNamingAMissingChunk) {
  auto p = RecordProto();
  std::string hash = p.chunks(0).hash();
  hash[0] = static_cast<char>(hash[0] ^ 1);  // a well-formed hash no chunk has
  p.mutable_chunks(0)->set_hash(hash);
  Put("tensors", EncodeTensorKey(2, 1, "param"), p.SerializeAsString());
  auto store = OpenOk();
  ASSERT_NE(store, nullptr);
  auto record = store->Tensor(2, 1, "param");
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  std::vector<uint8_t> out(record->bytes);
  EXPECT_EQ(store->ReadTensor(*record, out.data(), out.size()).code(), StatusCode::kCorruption);
  auto verify = store->Verify(2);
  ASSERT_TRUE(verify.ok());
  ASSERT_EQ(verify->problems.size(), 1u);
  EXPECT_EQ(verify->problems[0].status.code(), StatusCode::kNotFound);
  EXPECT_EQ(verify->problems[0].chunk_index, 0);
  EXPECT_TRUE(StepIsIntact(*store, 1));
}

// The chunks CF holds index entries (docs/format.md "Pack files"): one that
// does not parse, and a valid one that places another chunk's bytes.
TEST_F(MalformedRecordTest, DamagedChunkIndexEntries) {
  const std::string key0 = EncodeChunkKey(record_.chunks[0].hash);
  const std::string key1 = EncodeChunkKey(record_.chunks[1].hash);
  auto entry0 = RawGet(path_, "chunks", key0);
  ASSERT_TRUE(entry0.has_value());
  Put("chunks", key0, "not an index entry");
  Put("chunks", key1, *entry0);  // chunk 0's place: other bytes, another length
  auto store = OpenOk();
  ASSERT_NE(store, nullptr);
  auto record = store->Tensor(2, 1, "param");
  ASSERT_TRUE(record.ok());
  std::vector<uint8_t> out(record->bytes);
  EXPECT_EQ(store->ReadTensor(*record, out.data(), out.size()).code(), StatusCode::kCorruption);
  auto verify = store->Verify(2);
  ASSERT_TRUE(verify.ok());
  ASSERT_EQ(verify->problems.size(), 2u);
  EXPECT_EQ(verify->problems[0].chunk_index, 0);
  EXPECT_EQ(verify->problems[0].status.code(), StatusCode::kCorruption);
  EXPECT_EQ(verify->problems[1].chunk_index, 1);
  EXPECT_EQ(verify->problems[1].status.code(), StatusCode::kCorruption);
}

TEST_F(MalformedRecordTest, BadSnapshotRecords) {
  proto::SnapshotRecord good;
  {
    auto value = RawGet(path_, "snapshots", EncodeStepKey(2));
    ASSERT_TRUE(value.has_value());
    ASSERT_TRUE(good.ParseFromString(*value));
  }
  struct Case {
    const char* name;
    std::string value;
    StatusCode code;
  };
  proto::SnapshotRecord future = good;
  future.set_format_version(3);  // 1 and 2 are read (2: record groups)
  proto::SnapshotRecord wrong_step = good;
  wrong_step.set_step(3);
  const std::string full = good.SerializeAsString();
  const std::vector<Case> cases = {
      {"garbage", "\x0a\xff\xff\xff\xff", StatusCode::kCorruption},
      {"unknown version", future.SerializeAsString(), StatusCode::kNotSupported},
      {"wrong step", wrong_step.SerializeAsString(), StatusCode::kCorruption},
      {"truncated", full.substr(0, 3), StatusCode::kCorruption},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Put("snapshots", EncodeStepKey(2), c.value);
    auto store = OpenOk();
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->Info(2).status().code(), c.code);
    EXPECT_EQ(store->Manifest(2).status().code(), c.code);
    EXPECT_EQ(store->List().status().code(), c.code);
    EXPECT_TRUE(StepIsIntact(*store, 1));
    auto verify = store->Verify();
    ASSERT_TRUE(verify.ok()) << verify.status().ToString();
    ASSERT_EQ(verify->problems.size(), 1u);
    EXPECT_EQ(verify->problems[0].status.code(), c.code);
  }
  // A snapshot key that is not 8 bytes.
  Put("snapshots", EncodeStepKey(2), full);
  Put("snapshots", "short", full);
  auto store = OpenOk();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->List().status().code(), StatusCode::kCorruption);
}

TEST_F(MalformedRecordTest, BadMetaRecordsRefuseToOpen) {
  auto value = RawGet(path_, "meta", "store");
  ASSERT_TRUE(value.has_value());
  proto::StoreMeta good;
  ASSERT_TRUE(good.ParseFromString(*value));
  proto::StoreMeta future = good, no_chunk = good, other_hash = good;
  future.set_format_version(8);  // one above what this build reads
  no_chunk.set_chunk_bytes(0);
  other_hash.set_hash("md5");
  struct Case {
    const char* name;
    std::optional<std::string> value;
    StatusCode code;
  };
  const std::vector<Case> cases = {
      {"garbage", std::string("\xff\xfe garbage"), StatusCode::kCorruption},
      {"unknown version", future.SerializeAsString(), StatusCode::kNotSupported},
      {"chunk_bytes 0", no_chunk.SerializeAsString(), StatusCode::kCorruption},
      {"unknown hash", other_hash.SerializeAsString(), StatusCode::kNotSupported},
      {"missing with snapshots present", std::nullopt, StatusCode::kCorruption},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RawWrite(path_, "meta", "store", c.value ? &*c.value : nullptr);
    EXPECT_EQ(Store::Open(path_, TestStoreOptions()).status().code(), c.code);
    EXPECT_EQ(Store::OpenReadOnly(path_).status().code(), c.code);
  }
  RawWrite(path_, "meta", "store", &*value);
  auto store = OpenOk();
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(StoreHoldsExactly(*store, {1, 2}));
}

}  // namespace
}  // namespace trainsnap::testing
