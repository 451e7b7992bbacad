// A cheap estimate of how well each byte plane of a chunk compresses: the
// order-0 entropy of a sample, from byte histograms. The chunk codec uses it
// to choose which planes to entropy-code and whether an XOR delta pays,
// instead of compressing anything twice.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainsnap::internal {

// Elements sampled per chunk (evenly spaced). 4096 keeps the histogram
// pass under 2 % of a 1 MiB chunk's encode; the estimate of a uniformly
// random plane then reads about 7.95 bits.
inline constexpr size_t kEntropySampleElements = 4096;

// Writes one value per byte plane to bits_per_byte (`width` values, 1..16):
// the estimated order-0 entropy (0..8) of each byte plane of `raw` (size
// bytes of `width`-byte elements), XORed with `base` first when base is not
// null.
// With float16_split (width 2) the planes are those of SplitFloat16: the
// value rotated left by one bit, low byte then high byte. A chunk with no
// whole element (size < width), or a width above 16 (no codec width), gets
// a single value, over its bytes.
void EstimatePlaneBits(const uint8_t* raw, const uint8_t* base, size_t size, size_t width, bool float16_split,
                       double* bits_per_byte);

}  // namespace trainsnap::internal
