#include "store/byte_planes.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "store/codec_test_data.h"

namespace trainsnap::internal {
namespace {

using codec_test::Noise;

// The definition, one byte at a time.
std::vector<uint8_t> ReferenceShuffle(const std::vector<uint8_t>& in, size_t width) {
  std::vector<uint8_t> out(in);
  const size_t n = in.size() / width;
  for (size_t i = 0; i < n; ++i) {
    for (size_t b = 0; b < width; ++b) out[b * n + i] = in[i * width + b];
  }
  return out;
}

uint16_t RotateLeft1(uint16_t v) { return static_cast<uint16_t>((v << 1) | (v >> 15)); }

// Sizes around the vector loops' 16-element steps and a default-size chunk.
const std::vector<size_t> kElementCounts = {0, 1, 15, 16, 17, 31, 32, 33, 100, 4099};

TEST(BytePlanesTest, ShuffleMatchesTheDefinitionAtEveryWidth) {
  for (size_t width = 1; width <= 16; ++width) {
    for (size_t elements : kElementCounts) {
      for (size_t extra : {size_t{0}, width - 1}) {  // with and without a partial element
        const auto in = Noise(elements * width + extra, static_cast<uint32_t>(width * 1000 + elements));
        std::vector<uint8_t> out(in.size()), back(in.size());
        ShuffleBytes(in.data(), in.size(), width, out.data());
        ASSERT_EQ(out, ReferenceShuffle(in, width)) << "width " << width << " elements " << elements;
        UnshuffleBytes(out.data(), out.size(), width, back.data());
        ASSERT_EQ(back, in) << "width " << width << " elements " << elements;
      }
    }
  }
}

TEST(BytePlanesTest, UnshufflePlanesReadsSeparatePlanesAndAppliesTheXor) {
  for (size_t width : {2, 4, 8, 3}) {
    for (size_t elements : kElementCounts) {
      const size_t size = elements * width + 1;
      const auto raw = Noise(size, static_cast<uint32_t>(elements + width));
      const auto base = Noise(size, static_cast<uint32_t>(elements + width + 99));
      const auto planar = ReferenceShuffle(raw, width);
      // Each plane in its own allocation, as DecodePlanes points at them.
      std::vector<std::vector<uint8_t>> planes(width);
      const uint8_t* pointers[16];
      for (size_t b = 0; b < width; ++b) {
        planes[b].assign(planar.begin() + b * elements, planar.begin() + (b + 1) * elements);
        planes[b].push_back(0);  // a valid pointer also for empty planes
        pointers[b] = planes[b].data();
      }
      const uint8_t* tail = planar.data() + elements * width;
      std::vector<uint8_t> out(size);
      UnshufflePlanes(pointers, tail, size, width, nullptr, out.data());
      ASSERT_EQ(out, raw) << "width " << width << " elements " << elements;
      std::vector<uint8_t> expected(size);
      for (size_t j = 0; j < size; ++j) expected[j] = raw[j] ^ base[j];
      UnshufflePlanes(pointers, tail, size, width, base.data(), out.data());
      ASSERT_EQ(out, expected) << "xor, width " << width << " elements " << elements;
      // In place: the base is the destination (how a restore applies a delta).
      std::vector<uint8_t> in_place = base;
      UnshufflePlanes(pointers, tail, size, width, in_place.data(), in_place.data());
      ASSERT_EQ(in_place, expected) << "in place, width " << width << " elements " << elements;
    }
  }
}

TEST(BytePlanesTest, Float16SplitRotatesThenSplitsAndInvertsWithXor) {
  for (size_t elements : kElementCounts) {
    for (size_t extra : {0, 1}) {
      const size_t size = elements * 2 + extra;
      const auto in = Noise(size, static_cast<uint32_t>(elements * 2 + extra));
      std::vector<uint8_t> split(size), back(size);
      SplitFloat16(in.data(), size, split.data());
      for (size_t i = 0; i < elements; ++i) {
        uint16_t v;
        std::memcpy(&v, in.data() + 2 * i, 2);
        const uint16_t r = RotateLeft1(v);
        ASSERT_EQ(split[i], r & 0xff) << i;
        ASSERT_EQ(split[elements + i], r >> 8) << i;
      }
      if (extra) {
        EXPECT_EQ(split[size - 1], in[size - 1]);
      }
      UnsplitFloat16(split.data(), size, back.data());
      ASSERT_EQ(back, in) << elements;
      const auto base = Noise(size, static_cast<uint32_t>(size + 5));
      std::vector<uint8_t> in_place = base;
      UnsplitFloat16Planes(split.data(), split.data() + elements, split.data() + 2 * elements, size, in_place.data(),
                           in_place.data());
      for (size_t j = 0; j < size; ++j) ASSERT_EQ(in_place[j], in[j] ^ base[j]) << j;
    }
  }
}

TEST(BytePlanesTest, XorBytesWorksInPlace) {
  const auto a = Noise(1003, 1), b = Noise(1003, 2);
  std::vector<uint8_t> out = a;
  XorBytes(out.data(), b.data(), out.size(), out.data());
  for (size_t j = 0; j < a.size(); ++j) ASSERT_EQ(out[j], a[j] ^ b[j]);
}

}  // namespace
}  // namespace trainsnap::internal
