// Byte-plane transposes, the chunk codec's filters (docs/format.md, "Chunk
// values"). Byte b of element i sits at i * width + b in the interleaved
// (tensor) layout and at b * n + i in the planar one, for the n = size /
// width whole elements; a trailing partial element is copied unchanged.
// Widths 2 and 4 (and the 16-bit float split) use SSE2 on x86-64: they are
// the codec's hot loops for fp32, bf16 and fp16 training state.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainsnap::internal {

// Interleaved -> planar: out[b * n + i] = in[i * width + b]. `in` and `out`
// must not overlap.
void ShuffleBytes(const uint8_t* in, size_t size, size_t width, uint8_t* out);

// Planar -> interleaved, reading plane b from planes[b] (n bytes each) and
// the trailing partial element from `tail` (size - n * width bytes). With
// `xor_base` not null, writes xor_base[j] ^ value instead of value, so that
// an XOR delta is applied in the same pass; xor_base may equal out (each
// byte is read before it is written), nothing else may overlap out.
void UnshufflePlanes(const uint8_t* const* planes, const uint8_t* tail, size_t size, size_t width,
                     const uint8_t* xor_base, uint8_t* out);
// UnshufflePlanes of a contiguous planar buffer, without XOR.
void UnshuffleBytes(const uint8_t* in, size_t size, size_t width, uint8_t* out);

// The 16-bit float split: every 16-bit value rotated left by one bit (the
// sign moves to bit 0), then shuffled into two planes (low, high); for bf16
// the high plane is exactly the exponent. A trailing odd byte is copied.
void SplitFloat16(const uint8_t* in, size_t size, uint8_t* out);
// Its inverse from two plane pointers (n = size / 2 bytes each) and the
// tail, with the same `xor_base` contract as UnshufflePlanes.
void UnsplitFloat16Planes(const uint8_t* low, const uint8_t* high, const uint8_t* tail, size_t size,
                          const uint8_t* xor_base, uint8_t* out);
void UnsplitFloat16(const uint8_t* in, size_t size, uint8_t* out);

// out[j] = a[j] ^ b[j]; out may equal a or b.
void XorBytes(const uint8_t* a, const uint8_t* b, size_t size, uint8_t* out);

}  // namespace trainsnap::internal
