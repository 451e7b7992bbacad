#include "store/keys.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace trainsnap::internal {
namespace {

TEST(KeysTest, StepKeysSortNumerically) {
  const std::vector<int64_t> steps = {std::numeric_limits<int64_t>::min(), -1000, -1, 0, 1, 255, 256, 1 << 20,
                                      std::numeric_limits<int64_t>::max()};
  std::vector<std::string> keys;
  for (int64_t s : steps) {
    keys.push_back(EncodeStepKey(s));
    EXPECT_EQ(keys.back().size(), 8u);
    EXPECT_EQ(DecodeStepKey(keys.back()).value(), s);
  }
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
  EXPECT_EQ(EncodeStepKey(0), std::string("\x80\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(EncodeStepKey(-1), std::string("\x7f\xff\xff\xff\xff\xff\xff\xff", 8));
  EXPECT_EQ(EncodeStepKey(258), std::string("\x80\0\0\0\0\0\x01\x02", 8));
  EXPECT_EQ(DecodeStepKey("short").status().code(), StatusCode::kCorruption);
}

TEST(KeysTest, TensorKeys) {
  const std::string key = EncodeTensorKey(3, 0x0102030405060708ull, "exp_avg");
  EXPECT_EQ(key, std::string("\x80\0\0\0\0\0\0\x03\x01\x02\x03\x04\x05\x06\x07\x08", 16) + "exp_avg");
  EXPECT_EQ(key.compare(0, 8, TensorKeyPrefix(3)), 0);
  auto decoded = DecodeTensorKey(key);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->step, 3);
  EXPECT_EQ(decoded->param_id, 0x0102030405060708ull);
  EXPECT_EQ(decoded->role, "exp_avg");
  // Keys of one step sort by param_id, then role.
  EXPECT_LT(EncodeTensorKey(3, 1, "param"), EncodeTensorKey(3, 2, "exp_avg"));
  EXPECT_LT(EncodeTensorKey(3, 2, "exp_avg"), EncodeTensorKey(3, 2, "param"));
  EXPECT_LT(EncodeTensorKey(3, ~0ull, "z"), EncodeTensorKey(4, 0, "a"));
  EXPECT_EQ(DecodeTensorKey(std::string(15, 'x')).status().code(), StatusCode::kCorruption);
}

TEST(KeysTest, ChunkKeys) {
  ChunkHash h;
  for (int i = 0; i < 16; ++i) h.bytes[i] = static_cast<uint8_t>(i * 17);
  const std::string key = EncodeChunkKey(h);
  ASSERT_EQ(key.size(), 16u);
  EXPECT_EQ(static_cast<uint8_t>(key[15]), 255);
  EXPECT_EQ(DecodeChunkKey(key).value(), h);
  EXPECT_EQ(DecodeChunkKey(key.substr(1)).status().code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace trainsnap::internal
