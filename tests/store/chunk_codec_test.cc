#include "store/chunk_codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "store/chunk_hash.h"
#include "store/codec_test_data.h"

namespace trainsnap::internal {
namespace {

using codec_test::Noise;

// Slowly growing values of `width` bytes each: compressible at every width.
std::vector<uint8_t> Smooth(size_t n_elements, size_t width, uint32_t seed) {
  std::vector<uint8_t> v(n_elements * width);
  for (size_t i = 0; i < n_elements; ++i) {
    for (size_t b = 0; b < width; ++b) v[i * width + b] = static_cast<uint8_t>(b == 0 ? (i / 32 + seed) : b);
  }
  return v;
}

// float32-like: one random low byte, three constant high bytes. Shuffling
// gathers the constant bytes into planes that Zstd compresses to nothing.
std::vector<uint8_t> RandomLowByte(size_t n_elements, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n_elements * 4);
  for (size_t i = 0; i < n_elements; ++i) {
    v[i * 4] = static_cast<uint8_t>(rng());
    v[i * 4 + 1] = 0x00;
    v[i * 4 + 2] = 0x80;
    v[i * 4 + 3] = 0x3f;
  }
  return v;
}

ChunkHeader Header(const std::string& encoded) {
  auto h = ParseChunkHeader(encoded);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  return h.ok() ? *h : ChunkHeader();
}

std::vector<uint8_t> Decode(const std::string& encoded, size_t size) {
  std::vector<uint8_t> out(size);
  Status s = DecodeChunk(encoded, out.data(), size);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

TEST(ChunkCodecTest, ShuffleIsAByteTranspose) {
  const std::vector<uint8_t> in = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};  // 2 float32 + 3 trailing bytes
  std::vector<uint8_t> out(in.size()), back(in.size());
  ShuffleBytes(in.data(), in.size(), 4, out.data());
  EXPECT_EQ(out, (std::vector<uint8_t>{1, 5, 2, 6, 3, 7, 4, 8, 9, 10, 11}));
  UnshuffleBytes(out.data(), out.size(), 4, back.data());
  EXPECT_EQ(back, in);
  ShuffleBytes(in.data(), in.size(), 1, out.data());
  EXPECT_EQ(out, in);
}

class ChunkCodecWidthTest : public ::testing::TestWithParam<size_t> {};

TEST_P(ChunkCodecWidthTest, RoundTripsCompressibleAndIncompressible) {
  const size_t width = GetParam();
  // 1000 elements plus sizes that are not a multiple of anything in particular.
  for (size_t n : {size_t{1}, size_t{3}, size_t{1000}, size_t{4099}}) {
    auto smooth = Smooth(n, width, static_cast<uint32_t>(n));
    ChunkEncodeOptions o;
    o.element_size = width;
    std::string encoded;
    ASSERT_TRUE(EncodeChunk(smooth.data(), smooth.size(), o, &encoded).ok());
    EXPECT_EQ(Decode(encoded, smooth.size()), smooth) << "width " << width << " n " << n;
    ChunkHeader h = Header(encoded);
    EXPECT_EQ(h.raw_bytes, smooth.size());
    EXPECT_EQ(h.element_size, width);
    if (n >= 1000) {
      EXPECT_EQ(h.codec, width > 1 ? ChunkCodec::kPlanes : ChunkCodec::kZstd);
      EXPECT_EQ(h.filter, width > 1 ? ChunkFilter::kShuffle : ChunkFilter::kNone);
      EXPECT_LT(encoded.size(), smooth.size() / 2);
    }

    auto noise = Noise(n * width, static_cast<uint32_t>(n + 1));
    ASSERT_TRUE(EncodeChunk(noise.data(), noise.size(), o, &encoded).ok());
    EXPECT_EQ(Decode(encoded, noise.size()), noise);
    // Incompressible: stored raw, exactly header + bytes.
    EXPECT_EQ(Header(encoded).codec, ChunkCodec::kRaw);
    EXPECT_EQ(Header(encoded).filter, ChunkFilter::kNone);
    EXPECT_EQ(encoded.size(), kChunkHeaderBytes + noise.size());
  }
}

INSTANTIATE_TEST_SUITE_P(ElementWidths, ChunkCodecWidthTest, ::testing::Values(1, 2, 4, 8, 16));

TEST(ChunkCodecTest, ShuffleOffAndOnGiveTheSameBytesBack) {
  auto data = RandomLowByte(5000, 7);
  ChunkEncodeOptions o;
  o.element_size = 4;
  o.shuffle = false;
  std::string plain, shuffled;
  ASSERT_TRUE(EncodeChunk(data.data(), data.size(), o, &plain).ok());
  EXPECT_EQ(Header(plain).filter, ChunkFilter::kNone);
  o.shuffle = true;
  ASSERT_TRUE(EncodeChunk(data.data(), data.size(), o, &shuffled).ok());
  EXPECT_EQ(Header(shuffled).filter, ChunkFilter::kShuffle);
  // The point of the filter: the three constant planes vanish.
  EXPECT_LT(shuffled.size(), plain.size());
  EXPECT_LT(shuffled.size(), data.size() / 4 + 200);
  EXPECT_EQ(Decode(plain, data.size()), data);
  EXPECT_EQ(Decode(shuffled, data.size()), data);
}

TEST(ChunkCodecTest, EmptyChunk) {
  std::string encoded;
  ASSERT_TRUE(EncodeChunk(nullptr, 0, {}, &encoded).ok());
  EXPECT_EQ(encoded.size(), kChunkHeaderBytes);
  EXPECT_TRUE(DecodeChunk(encoded, nullptr, 0).ok());
}

TEST(ChunkCodecTest, HeaderBytesAreAsDocumented) {
  auto data = Smooth(1000, 2, 3);
  ChunkEncodeOptions o;
  o.element_size = 2;
  std::string encoded;
  ASSERT_TRUE(EncodeChunk(data.data(), data.size(), o, &encoded).ok());
  const auto* p = reinterpret_cast<const uint8_t*>(encoded.data());
  EXPECT_EQ(p[0], 0xC7);  // magic
  EXPECT_EQ(p[1], 1);     // version
  EXPECT_EQ(p[2], 2);     // plane coded
  EXPECT_EQ(p[3], 1);     // shuffle
  EXPECT_EQ(p[4], 2);     // element size
  EXPECT_EQ(p[5] | p[6] | p[7], 0);
  EXPECT_EQ(p[8], 2000 & 0xff);  // raw length, little-endian
  EXPECT_EQ(p[9], 2000 >> 8);
  for (int i = 10; i < 16; ++i) EXPECT_EQ(p[i], 0);
  // The plane table: two little-endian uint32 stored lengths (1000 bytes
  // per plane), then the planes. Plane 1 is constant (coded), plane 0 too.
  ASSERT_GE(encoded.size(), 24u);
  const uint32_t plane0 = p[16] | p[17] << 8 | p[18] << 16 | static_cast<uint32_t>(p[19]) << 24;
  const uint32_t plane1 = p[20] | p[21] << 8 | p[22] << 16 | static_cast<uint32_t>(p[23]) << 24;
  EXPECT_LT(plane0, 1000u);
  EXPECT_LT(plane1, 1000u);
  EXPECT_EQ(encoded.size(), 24u + plane0 + plane1);
}

TEST(ChunkCodecTest, RejectsBadOptions) {
  uint8_t byte = 0;
  std::string encoded;
  ChunkEncodeOptions o;
  o.element_size = 0;
  EXPECT_EQ(EncodeChunk(&byte, 1, o, &encoded).code(), StatusCode::kInvalidArgument);
  o.element_size = 17;
  EXPECT_EQ(EncodeChunk(&byte, 1, o, &encoded).code(), StatusCode::kInvalidArgument);
  o.element_size = 1;
  o.zstd_level = 1000;
  EXPECT_EQ(EncodeChunk(&byte, 1, o, &encoded).code(), StatusCode::kInvalidArgument);
}

// The whole-chunk Zstd encoding (ChunkCodec::kZstd) of stores written
// before format version 7; ChunkCodecPlanesTest checks the plane table.
TEST(ChunkCodecTest, DecodeValidatesStrictly) {
  auto data = Smooth(2000, 4, 9);
  ChunkEncodeOptions o;
  o.element_size = 4;
  o.planes = false;
  std::string good;
  ASSERT_TRUE(EncodeChunk(data.data(), data.size(), o, &good).ok());
  ASSERT_EQ(Header(good).codec, ChunkCodec::kZstd);
  std::vector<uint8_t> out(data.size());
  auto expect_corrupt = [&](std::string bad, size_t size, const std::string& needle) {
    std::vector<uint8_t> dst(size);
    Status s = DecodeChunk(bad, dst.data(), size);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  std::string bad = good;
  bad[0] = 0x00;
  expect_corrupt(bad, data.size(), "bad magic");
  bad = good;
  bad[1] = 2;
  expect_corrupt(bad, data.size(), "unknown format version 2");
  bad = good;
  bad[2] = 7;
  expect_corrupt(bad, data.size(), "unknown codec 7");
  bad = good;
  bad[3] = 4;
  expect_corrupt(bad, data.size(), "unknown filter 4");
  bad = good;
  bad[3] = 2;  // xor-delta needs a chain depth
  expect_corrupt(bad, data.size(), "delta chunk with chain depth 0");
  bad = good;
  bad[4] = 0;
  expect_corrupt(bad, data.size(), "bad element size 0");
  bad = good;
  bad[6] = 1;
  expect_corrupt(bad, data.size(), "reserved bytes");
  expect_corrupt(good.substr(0, 10), data.size(), "shorter than its 16-byte header");
  expect_corrupt(good, data.size() - 4, "differs from the expected");
  bad = good;
  bad[8] = static_cast<char>(bad[8] + 4);  // header claims 4 more bytes than the frame holds
  expect_corrupt(bad, data.size() + 4, "zstd");
  bad = good;
  bad.resize(bad.size() - 3);  // truncated frame
  expect_corrupt(bad, data.size(), "zstd");
  bad = good;
  bad[30] = static_cast<char>(bad[30] ^ 0x40);  // damaged payload: zstd error or different bytes
  std::vector<uint8_t> dst(data.size());
  Status s = DecodeChunk(bad, dst.data(), dst.size());
  EXPECT_TRUE(s.code() == StatusCode::kCorruption || dst != data);

  // A raw chunk whose header and payload length disagree.
  auto noise = Noise(100, 1);
  std::string raw;
  ASSERT_TRUE(EncodeChunk(noise.data(), noise.size(), {}, &raw).ok());
  ASSERT_EQ(Header(raw).codec, ChunkCodec::kRaw);
  expect_corrupt(raw + "x", 100, "raw length 100 but payload has 101 bytes");
  bad = raw;
  bad[3] = 1;
  expect_corrupt(bad, 100, "raw chunk with a filter");
  EXPECT_TRUE(DecodeChunk(raw, out.data(), 100).ok());
}

// Damaged values never crash the decoder (run it under ASan): it fails with
// Corruption, or yields bytes that the caller's hash check then judges (a
// few damages, e.g. to unused bits of the Zstd frame header, are harmless).
TEST(ChunkCodecTest, RandomDamageIsCorruptionOrDifferentBytes) {
  std::mt19937 rng(2024);
  for (size_t width : {1, 2, 4, 8}) {
    auto data = Smooth(3000, width, 5);
    auto noise = Noise(700, 6);
    data.insert(data.end(), noise.begin(), noise.end());  // not a multiple of width
    ChunkEncodeOptions o;
    o.element_size = width;
    std::string good;
    ASSERT_TRUE(EncodeChunk(data.data(), data.size(), o, &good).ok());
    int corrupt = 0, different = 0, same = 0;
    for (int trial = 0; trial < 500; ++trial) {
      std::string bad = good;
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f) bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
      if (trial % 5 == 0) bad.resize(rng() % bad.size());  // truncation
      std::vector<uint8_t> out(data.size());
      Status st = DecodeChunk(bad, out.data(), out.size());
      if (!st.ok()) {
        EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
        ++corrupt;
      } else if (out != data) {
        // What a read does next: the hash of the decoded bytes must differ.
        EXPECT_FALSE(HashChunk(out.data(), out.size()) == HashChunk(data.data(), data.size()));
        ++different;
      } else {
        ++same;
      }
    }
    // Zstd frames carry no checksum (the chunk hash is the check): the codec
    // itself catches the damage to headers and frame structure (~30% here).
    EXPECT_GT(corrupt, 50) << "width " << width << ": " << different << " different, " << same << " same";
    EXPECT_LE(same, 5) << "width " << width;
  }
}

}  // namespace
}  // namespace trainsnap::internal

namespace trainsnap::internal {
namespace {

// float32 weights and the same weights after a small update: their XOR is
// mostly zero bytes (sign, exponent and high mantissa bits agree).
std::pair<std::vector<float>, std::vector<float>> SmallUpdate(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> before(n), after(n);
  for (size_t i = 0; i < n; ++i) {
    before[i] = dist(rng) * 0.02f;
    after[i] = before[i] * (1.f + 1e-4f * dist(rng));
  }
  return {before, after};
}

TEST(ChunkCodecDeltaTest, RoundTripsAndIsSmallerThanPlain) {
  auto [before, after] = SmallUpdate(16384, 3);
  const size_t size = after.size() * sizeof(float);
  const ChunkHash base_hash = HashChunk(before.data(), size);
  ChunkEncodeOptions o;
  o.element_size = 4;
  std::string plain, delta;
  ASSERT_TRUE(EncodeChunk(after.data(), size, o, &plain).ok());
  ASSERT_TRUE(EncodeDeltaChunk(after.data(), before.data(), size, base_hash, 3, o, &delta).ok());
  EXPECT_LT(delta.size() * 2, plain.size()) << delta.size() << " vs " << plain.size();
  auto h = ParseChunkHeader(delta);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->filter, ChunkFilter::kXorDelta);
  EXPECT_EQ(h->inner_filter, ChunkFilter::kShuffle);
  EXPECT_EQ(h->delta_depth, 4);
  EXPECT_EQ(h->base, base_hash);
  EXPECT_EQ(h->raw_bytes, size);
  std::vector<float> out(after.size());
  ASSERT_TRUE(DecodeChunk(delta, out.data(), size, before.data()).ok());
  EXPECT_EQ(std::memcmp(out.data(), after.data(), size), 0);
  // The estimate agrees on which encoding is smaller.
  EXPECT_LT(EstimateEncodedSize(after.data(), before.data(), size, o),
            EstimateEncodedSize(after.data(), nullptr, size, o));
}

TEST(ChunkCodecDeltaTest, DecodeNeedsTheBaseAndValidatesTheHeader) {
  auto [before, after] = SmallUpdate(1000, 4);
  const size_t size = after.size() * sizeof(float);
  ChunkEncodeOptions o;
  o.element_size = 4;
  std::string delta;
  ASSERT_TRUE(EncodeDeltaChunk(after.data(), before.data(), size, HashChunk(before.data(), size), 0, o, &delta).ok());
  std::vector<float> out(after.size());
  Status s = DecodeChunk(delta, out.data(), size);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("without its base"), std::string::npos) << s.message();
  std::string bad = delta;
  bad[5] = 0;
  EXPECT_EQ(DecodeChunk(bad, out.data(), size, before.data()).code(), StatusCode::kCorruption);
  bad = delta;
  bad[6] = 2;  // a delta inside a delta
  s = DecodeChunk(bad, out.data(), size, before.data());
  EXPECT_NE(s.message().find("bad inner filter 2"), std::string::npos) << s.message();
  bad = delta;
  bad[2] = 0;  // delta chunks are never raw
  s = DecodeChunk(bad, out.data(), size, before.data());
  EXPECT_NE(s.message().find("delta chunk stored raw"), std::string::npos) << s.message();
  s = DecodeChunk(delta.substr(0, 20), out.data(), size, before.data());
  EXPECT_NE(s.message().find("too short for its base hash"), std::string::npos) << s.message();
  // Depth 255 cannot take another level.
  EXPECT_EQ(EncodeDeltaChunk(after.data(), before.data(), size, {}, kMaxDeltaDepth, o, &delta).code(),
            StatusCode::kInvalidArgument);
}

TEST(ChunkCodecFloat16SplitTest, RoundTripsAndIsInvertible) {
  std::mt19937 rng(5);
  for (size_t size : {0, 1, 2, 7, 1000, 4097}) {
    std::vector<uint8_t> in(size), split(size), back(size);
    for (auto& b : in) b = static_cast<uint8_t>(rng());
    SplitFloat16(in.data(), size, split.data());
    UnsplitFloat16(split.data(), size, back.data());
    EXPECT_EQ(back, in) << size;
  }
  // bf16 1.0 = 0x3f80: rotated left = 0x7f00: exponent plane 0x7f, low plane 0x00.
  const uint8_t one[2] = {0x80, 0x3f};
  uint8_t planes[2];
  SplitFloat16(one, 2, planes);
  EXPECT_EQ(planes[0], 0x00);
  EXPECT_EQ(planes[1], 0x7f);
  // -1.0 = 0xbf80: rotated = 0x7f01: the sign lands in the low plane.
  const uint8_t minus_one[2] = {0x80, 0xbf};
  SplitFloat16(minus_one, 2, planes);
  EXPECT_EQ(planes[0], 0x01);
  EXPECT_EQ(planes[1], 0x7f);

  // Encoded with the split: filter 3, element size 2, bit-exact round trip.
  std::normal_distribution<float> dist(0.f, 0.02f);
  std::vector<uint16_t> bf16(50000);
  for (auto& v : bf16) {
    const float f = dist(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    v = static_cast<uint16_t>(bits >> 16);
  }
  ChunkEncodeOptions o;
  o.element_size = 2;
  o.float16_split = true;
  std::string encoded;
  ASSERT_TRUE(EncodeChunk(bf16.data(), bf16.size() * 2, o, &encoded).ok());
  auto h = ParseChunkHeader(encoded);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->filter, ChunkFilter::kFloat16Split);
  std::vector<uint16_t> out(bf16.size());
  ASSERT_TRUE(DecodeChunk(encoded, out.data(), out.size() * 2).ok());
  EXPECT_EQ(out, bf16);
  // A split chunk must have element size 2.
  std::string bad = encoded;
  bad[4] = 4;
  Status s = DecodeChunk(bad, out.data(), out.size() * 2);
  EXPECT_NE(s.message().find("16-bit float split with element size 4"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace trainsnap::internal

namespace trainsnap::internal {
namespace {

using codec_test::NormalBf16Bytes;
using codec_test::NormalFp32Bytes;

// The plane table of a plane-coded chunk (after `prefix` bytes).
std::vector<uint32_t> PlaneLengths(const std::string& encoded, size_t prefix, size_t planes) {
  std::vector<uint32_t> lengths(planes);
  for (size_t b = 0; b < planes; ++b) {
    const auto* p = reinterpret_cast<const uint8_t*>(encoded.data() + prefix + 4 * b);
    lengths[b] = p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24;
  }
  return lengths;
}

// fp32 training state: the three low planes are noise (stored raw, never
// given to Zstd); the top plane (sign and exponent) is coded. The chunk is
// no larger than the whole-chunk Zstd frame of format version 6.
TEST(ChunkCodecPlanesTest, Fp32CodesOnlyTheTopPlaneAndIsNoLargerThanOneFrame) {
  const auto data = NormalFp32Bytes(262144, 1);  // one default 1 MiB chunk
  ChunkEncodeOptions o;
  o.element_size = 4;
  std::string planes, frame;
  ASSERT_TRUE(EncodeChunk(data.data(), data.size(), o, &planes).ok());
  o.planes = false;
  ASSERT_TRUE(EncodeChunk(data.data(), data.size(), o, &frame).ok());
  ChunkHeader h = Header(planes);
  EXPECT_EQ(h.codec, ChunkCodec::kPlanes);
  EXPECT_EQ(h.filter, ChunkFilter::kShuffle);
  EXPECT_EQ(Header(frame).codec, ChunkCodec::kZstd);
  const auto lengths = PlaneLengths(planes, kChunkHeaderBytes, 4);
  EXPECT_EQ(lengths[0], 262144u);  // raw
  EXPECT_EQ(lengths[1], 262144u);  // raw
  EXPECT_LT(lengths[3], 262144u / 2);
  EXPECT_EQ(planes.size(), kChunkHeaderBytes + 16 + lengths[0] + lengths[1] + lengths[2] + lengths[3]);
  EXPECT_LE(planes.size(), frame.size() * 1.01) << planes.size() << " vs " << frame.size();
  EXPECT_EQ(Decode(planes, data.size()), data);
  EXPECT_EQ(Decode(frame, data.size()), data);
  // The estimate the delta choice uses is close to what was stored.
  const double estimate = static_cast<double>(EstimateEncodedSize(data.data(), nullptr, data.size(), o));
  EXPECT_NEAR(estimate / static_cast<double>(planes.size()), 1.0, 0.05) << estimate << " vs " << planes.size();
}

TEST(ChunkCodecPlanesTest, Bf16CodesTheExponentPlaneOnly) {
  const auto data = NormalBf16Bytes(524288, 2);
  ChunkEncodeOptions o;
  o.element_size = 2;
  o.float16_split = true;
  std::string planes, frame;
  ASSERT_TRUE(EncodeChunk(data.data(), data.size(), o, &planes).ok());
  o.planes = false;
  ASSERT_TRUE(EncodeChunk(data.data(), data.size(), o, &frame).ok());
  EXPECT_EQ(Header(planes).codec, ChunkCodec::kPlanes);
  EXPECT_EQ(Header(planes).filter, ChunkFilter::kFloat16Split);
  const auto lengths = PlaneLengths(planes, kChunkHeaderBytes, 2);
  EXPECT_EQ(lengths[0], 524288u);      // mantissa and sign: raw
  EXPECT_LT(lengths[1], 524288u / 2);  // exponent: coded
  EXPECT_LE(planes.size(), frame.size() * 1.01) << planes.size() << " vs " << frame.size();
  EXPECT_EQ(Decode(planes, data.size()), data);
}

// A bf16 update of 1e-4 of a weight's scale changes few values once rounded:
// the XOR delta is mostly zero runs, which only Zstd's matches find. Its
// planes are coded without the acceleration that a keyframe's planes get
// (with it, this chunk codes about 2x larger: 1/18 of its bytes, not 1/35).
TEST(ChunkCodecPlanesTest, Bf16DeltaOfASmallUpdateCodesItsZeroRunsCompactly) {
  const size_t n = 524288;
  const auto before = NormalBf16Bytes(n, 5);
  std::vector<uint8_t> after(before.size());
  std::mt19937 rng(6);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (size_t i = 0; i < n; ++i) {
    uint16_t a;
    std::memcpy(&a, &before[2 * i], 2);
    const uint32_t bits = uint32_t{a} << 16;
    float x;
    std::memcpy(&x, &bits, 4);
    x += 1e-4f * 0.02f * dist(rng);
    uint8_t fp32[4];
    std::memcpy(fp32, &x, 4);
    const uint16_t b = codec_test::Bf16Bits(fp32);
    std::memcpy(&after[2 * i], &b, 2);
  }
  ChunkEncodeOptions o;
  o.zstd_level = 1;  // the store's default, where keyframe planes are accelerated
  o.element_size = 2;
  o.float16_split = true;
  std::string delta;
  ASSERT_TRUE(
      EncodeDeltaChunk(after.data(), before.data(), after.size(), HashChunk(before.data(), before.size()), 0, o, &delta)
          .ok());
  EXPECT_LT(delta.size() * 25, after.size()) << delta.size();
  std::vector<uint8_t> out(after.size());
  ASSERT_TRUE(DecodeChunk(delta, out.data(), out.size(), before.data()).ok());
  EXPECT_EQ(out, after);
}

// Which coded planes get the accelerated parameters: every plane of a
// keyframe chunk; a delta's only from kAcceleratedDeltaPlaneBits on (below,
// zero runs that the plain parameters' matches code compactly).
TEST(ChunkCodecPlanesTest, DeltaPlanesAreAcceleratedFromOneBitPerByte) {
  EXPECT_EQ(kAcceleratedDeltaPlaneBits, 1.0);
  EXPECT_TRUE(AcceleratePlane(/*delta=*/false, 0.0));
  EXPECT_TRUE(AcceleratePlane(/*delta=*/false, 7.4));
  EXPECT_FALSE(AcceleratePlane(/*delta=*/true, 0.0));
  EXPECT_FALSE(AcceleratePlane(/*delta=*/true, 0.999));
  EXPECT_TRUE(AcceleratePlane(/*delta=*/true, 1.0));
  EXPECT_TRUE(AcceleratePlane(/*delta=*/true, 7.4));
}

// An fp32 delta whose planes fall on both sides of that line: after a
// relative update of 3e-3 the XOR's third plane (high mantissa bits, about
// 1.9 bits per byte) is coded accelerated, its top plane (sign, exponent:
// nearly all zero) plain, the two low planes are noise and stored raw.
// Decodes bit-exact.
TEST(ChunkCodecPlanesTest, Fp32DeltaCodesItsMantissaAndExponentPlanes) {
  std::mt19937 rng(8);
  std::normal_distribution<float> dist(0.f, 1.f);
  const size_t n = 262144;  // one default 1 MiB chunk
  std::vector<float> before(n), after(n);
  for (size_t i = 0; i < n; ++i) {
    before[i] = 0.02f * dist(rng);
    after[i] = before[i] * (1.f + 3e-3f * dist(rng));
  }
  const size_t size = n * sizeof(float);
  ChunkEncodeOptions o;
  o.zstd_level = 1;
  o.element_size = 4;
  std::string delta, plain;
  ASSERT_TRUE(EncodeDeltaChunk(after.data(), before.data(), size, HashChunk(before.data(), size), 0, o, &delta).ok());
  ASSERT_TRUE(EncodeChunk(after.data(), size, o, &plain).ok());
  ASSERT_EQ(Header(delta).codec, ChunkCodec::kPlanes);
  const auto lengths = PlaneLengths(delta, kChunkHeaderBytes + sizeof(ChunkHash), 4);
  EXPECT_EQ(lengths[0], n);  // raw
  EXPECT_EQ(lengths[1], n);  // raw
  EXPECT_LT(lengths[2], n / 2);
  EXPECT_LT(lengths[3], n / 50);
  EXPECT_EQ(delta.size(),
            kChunkHeaderBytes + sizeof(ChunkHash) + 16 + lengths[0] + lengths[1] + lengths[2] + lengths[3]);
  EXPECT_LT(delta.size(), plain.size() * 0.8) << delta.size() << " vs " << plain.size();
  std::vector<float> out = before;
  ASSERT_TRUE(DecodeChunk(delta, out.data(), size, out.data()).ok());
  EXPECT_EQ(std::memcmp(out.data(), after.data(), size), 0);
}

// Odd sizes: a trailing partial element is stored after the planes.
TEST(ChunkCodecPlanesTest, TrailingBytesRoundTrip) {
  for (size_t extra : {1, 2, 3}) {
    auto data = NormalFp32Bytes(5000, 3);
    data.resize(data.size() + extra, 0x5a);
    ChunkEncodeOptions o;
    o.element_size = 4;
    std::string encoded;
    ASSERT_TRUE(EncodeChunk(data.data(), data.size(), o, &encoded).ok());
    EXPECT_EQ(Header(encoded).codec, ChunkCodec::kPlanes);
    EXPECT_EQ(Decode(encoded, data.size()), data) << extra;
  }
}

// A delta goes through the same planes; decoding applies it onto a base
// that may be the destination itself (how a restore decodes a delta).
TEST(ChunkCodecPlanesTest, DeltaDecodesInPlaceOverItsBase) {
  auto [before, after] = SmallUpdate(262144, 4);
  const size_t size = after.size() * sizeof(float);
  const ChunkHash base_hash = HashChunk(before.data(), size);
  for (bool planes : {true, false}) {
    ChunkEncodeOptions o;
    o.element_size = 4;
    o.planes = planes;
    std::string delta;
    ASSERT_TRUE(EncodeDeltaChunk(after.data(), before.data(), size, base_hash, 0, o, &delta).ok());
    EXPECT_EQ(Header(delta).codec, planes ? ChunkCodec::kPlanes : ChunkCodec::kZstd);
    std::vector<float> in_place = before;
    ASSERT_TRUE(DecodeChunk(delta, in_place.data(), size, in_place.data()).ok());
    EXPECT_EQ(std::memcmp(in_place.data(), after.data(), size), 0) << "planes " << planes;
    std::vector<float> separate(after.size());
    ASSERT_TRUE(DecodeChunk(delta, separate.data(), size, before.data()).ok());
    EXPECT_EQ(std::memcmp(separate.data(), after.data(), size), 0) << "planes " << planes;
  }
  // bf16 deltas too (split planes, in place).
  const auto bf_before = NormalBf16Bytes(4099, 5);
  auto bf_after = bf_before;
  for (size_t i = 0; i < bf_after.size(); i += 14) bf_after[i] ^= 1;  // a few mantissa bits change
  ChunkEncodeOptions o;
  o.element_size = 2;
  o.float16_split = true;
  std::string delta;
  ASSERT_TRUE(EncodeDeltaChunk(bf_after.data(), bf_before.data(), bf_after.size(),
                               HashChunk(bf_before.data(), bf_before.size()), 0, o, &delta)
                  .ok());
  EXPECT_EQ(Header(delta).codec, ChunkCodec::kPlanes);
  EXPECT_EQ(Header(delta).inner_filter, ChunkFilter::kFloat16Split);
  auto in_place = bf_before;
  ASSERT_TRUE(DecodeChunk(delta, in_place.data(), in_place.size(), in_place.data()).ok());
  EXPECT_EQ(in_place, bf_after);
}

// Incompressible fp32 bytes (every plane noise): stored raw, and the
// estimate alone decides it (nothing is compressed).
TEST(ChunkCodecPlanesTest, NoisePlanesAreStoredRaw) {
  const auto noise = Noise(1 << 20, 6);
  ChunkEncodeOptions o;
  o.element_size = 4;
  std::string encoded;
  ASSERT_TRUE(EncodeChunk(noise.data(), noise.size(), o, &encoded).ok());
  EXPECT_EQ(Header(encoded).codec, ChunkCodec::kRaw);
  EXPECT_EQ(encoded.size(), kChunkHeaderBytes + noise.size());
  EXPECT_EQ(EstimateEncodedSize(noise.data(), nullptr, noise.size(), o), noise.size());
}

TEST(ChunkCodecPlanesTest, DecodeValidatesThePlaneTable) {
  const auto data = NormalFp32Bytes(2000, 7);
  ChunkEncodeOptions o;
  o.element_size = 4;
  std::string good;
  ASSERT_TRUE(EncodeChunk(data.data(), data.size(), o, &good).ok());
  ASSERT_EQ(Header(good).codec, ChunkCodec::kPlanes);
  const auto lengths = PlaneLengths(good, kChunkHeaderBytes, 4);
  ASSERT_EQ(lengths[0], 2000u);
  ASSERT_LT(lengths[3], 2000u);
  auto expect_corrupt = [&](const std::string& bad, const std::string& needle) {
    std::vector<uint8_t> dst(data.size());
    Status s = DecodeChunk(bad, dst.data(), dst.size());
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  std::string bad = good;
  bad[16] = static_cast<char>(0xd1);  // plane 0 claims 2001 bytes (0x7d1)
  expect_corrupt(bad, "plane 0 stores 2001 bytes, more than its 2000 raw bytes");
  expect_corrupt(good + "x", "1 bytes after the planes, expected a tail of 0");
  expect_corrupt(good.substr(0, kChunkHeaderBytes + 10), "payload shorter than its plane table");
  expect_corrupt(good.substr(0, good.size() - 1), "plane-coded chunk");
  bad = good;
  bad[3] = 0;  // plane coding needs planes
  expect_corrupt(bad, "plane coding without byte planes (filter 0, element size 4)");
  bad = good;
  bad[4] = 1;
  expect_corrupt(bad, "plane coding without byte planes (filter 1, element size 1)");
  bad = good;
  bad[2] = 3;
  expect_corrupt(bad, "unknown codec 3");
  // Plane 3's frame damaged: a Zstd error or, rarely, different bytes.
  bad = good;
  const size_t frame_at = kChunkHeaderBytes + 16 + lengths[0] + lengths[1] + lengths[2];
  bad[frame_at + lengths[3] / 2] = static_cast<char>(bad[frame_at + lengths[3] / 2] ^ 0x55);
  std::vector<uint8_t> dst(data.size());
  Status s = DecodeChunk(bad, dst.data(), dst.size());
  EXPECT_TRUE(s.code() == StatusCode::kCorruption || dst != data);
}

}  // namespace
}  // namespace trainsnap::internal
