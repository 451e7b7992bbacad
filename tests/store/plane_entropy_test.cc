#include "store/plane_entropy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "store/codec_test_data.h"

namespace trainsnap::internal {
namespace {

using codec_test::NormalFp32Bytes;

TEST(PlaneEntropyTest, ConstantRandomAndTwoValuedPlanes) {
  // Plane 0 constant, plane 1 uniformly random, plane 2 two values, plane 3 four.
  std::mt19937 rng(1);
  std::vector<uint8_t> data(4 * 100000);
  for (size_t i = 0; i < 100000; ++i) {
    data[4 * i] = 7;
    data[4 * i + 1] = static_cast<uint8_t>(rng());
    data[4 * i + 2] = (rng() & 1) ? 0x40 : 0x3f;
    data[4 * i + 3] = static_cast<uint8_t>(rng() & 3);
  }
  double bits[4];
  EstimatePlaneBits(data.data(), nullptr, data.size(), 4, false, bits);
  EXPECT_EQ(bits[0], 0.0);
  EXPECT_GT(bits[1], 7.9);
  EXPECT_NEAR(bits[2], 1.0, 0.02);
  EXPECT_NEAR(bits[3], 2.0, 0.02);
}

TEST(PlaneEntropyTest, Fp32WeightsHaveOneCompressiblePlaneAndTheirDeltaMore) {
  const auto before = NormalFp32Bytes(262144, 2);  // a 1 MiB chunk
  std::vector<uint8_t> after = before;
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.f, 1e-4f);
  for (size_t i = 0; i < after.size() / 4; ++i) {
    float f;
    std::memcpy(&f, after.data() + 4 * i, 4);
    f *= 1.f + noise(rng);
    std::memcpy(after.data() + 4 * i, &f, 4);
  }
  double bits[4];
  EstimatePlaneBits(after.data(), nullptr, after.size(), 4, false, bits);
  EXPECT_GT(bits[0], 7.9);
  EXPECT_GT(bits[1], 7.9);
  EXPECT_LT(bits[3], 4.0);  // sign and the exponent's top bits
  double delta[4];
  EstimatePlaneBits(after.data(), before.data(), after.size(), 4, false, delta);
  EXPECT_LT(delta[3], 0.5);  // sign and exponent unchanged almost everywhere
  EXPECT_LT(delta[2], 5.0);
  // XOR with itself: every plane constant.
  EstimatePlaneBits(after.data(), after.data(), after.size(), 4, false, delta);
  for (double b : delta) EXPECT_EQ(b, 0.0);
}

TEST(PlaneEntropyTest, Float16SplitPutsTheExponentInTheHighPlane) {
  const auto fp32 = NormalFp32Bytes(65536, 4);
  std::vector<uint8_t> bf16(65536 * 2);
  for (size_t i = 0; i < 65536; ++i) std::memcpy(bf16.data() + 2 * i, fp32.data() + 4 * i + 2, 2);  // truncation
  double bits[2];
  EstimatePlaneBits(bf16.data(), nullptr, bf16.size(), 2, true, bits);
  EXPECT_GT(bits[0], 7.0);  // 7 mantissa bits and the sign
  EXPECT_LT(bits[1], 4.0);  // the exponent
  double unrotated[2];
  EstimatePlaneBits(bf16.data(), nullptr, bf16.size(), 2, false, unrotated);
  EXPECT_GT(unrotated[1], bits[1]);  // without the rotation the sign mixes into the exponent plane
}

TEST(PlaneEntropyTest, ShortInputsGetOneEstimate) {
  const uint8_t three[3] = {1, 1, 2};
  double bits[4] = {-1, -1, -1, -1};
  EstimatePlaneBits(three, nullptr, 3, 4, false, bits);
  EXPECT_NEAR(bits[0], 0.918, 0.001);  // -(2/3 log2 2/3 + 1/3 log2 1/3)
  EXPECT_EQ(bits[1], -1);              // not written
  EstimatePlaneBits(three, nullptr, 0, 4, false, bits);
  EXPECT_EQ(bits[0], 0.0);
}

}  // namespace
}  // namespace trainsnap::internal
