#include "store/plane_entropy.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

namespace trainsnap::internal {
namespace {

double EntropyBits(const uint32_t* histogram, uint32_t total) {
  if (total == 0) return 0.0;
  double sum = 0.0;
  for (int v = 0; v < 256; ++v) {
    if (histogram[v]) sum += histogram[v] * std::log2(static_cast<double>(histogram[v]));
  }
  return std::log2(static_cast<double>(total)) - sum / total;
}

}  // namespace

void EstimatePlaneBits(const uint8_t* raw, const uint8_t* base, size_t size, size_t width, bool float16_split,
                       double* bits_per_byte) {
  const size_t w = std::max<size_t>(1, width);
  size_t n = size / w;
  size_t planes = w;
  if (n == 0 || w > 16) {  // fewer bytes than one element, or no codec width: one plane of bytes
    n = size;
    planes = 1;
  }
  const size_t elements = planes == 1 ? size : n;
  const size_t step_width = planes == 1 ? 1 : w;
  const size_t samples = std::min(elements, kEntropySampleElements);
  thread_local std::vector<uint32_t> histograms;
  histograms.assign(planes * 256, 0);
  const bool rotate = float16_split && w == 2 && planes == 2;
  for (size_t k = 0; k < samples; ++k) {
    // Evenly spaced, the last sample near the end of the chunk.
    const size_t i = samples == elements ? k : k * elements / samples;
    uint8_t bytes[16];
    const size_t offset = i * step_width;
    std::memcpy(bytes, raw + offset, planes);
    if (base) {
      for (size_t b = 0; b < planes; ++b) bytes[b] ^= base[offset + b];
    }
    if (rotate) {
      uint16_t v;
      std::memcpy(&v, bytes, 2);
      v = static_cast<uint16_t>((v << 1) | (v >> 15));
      bytes[0] = static_cast<uint8_t>(v & 0xff);
      bytes[1] = static_cast<uint8_t>(v >> 8);
    }
    for (size_t b = 0; b < planes; ++b) ++histograms[b * 256 + bytes[b]];
  }
  for (size_t b = 0; b < planes; ++b) {
    bits_per_byte[b] = EntropyBits(histograms.data() + b * 256, static_cast<uint32_t>(samples));
  }
}

}  // namespace trainsnap::internal
