#include "store/byte_planes.h"

#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace trainsnap::internal {
namespace {

inline uint16_t RotateLeft1(uint16_t v) { return static_cast<uint16_t>((v << 1) | (v >> 15)); }
inline uint16_t RotateRight1(uint16_t v) { return static_cast<uint16_t>((v >> 1) | (v << 15)); }

// The scalar loops, from element `first` on: the whole job where there is no
// SSE2, and the last few elements after the vector loops.
template <size_t W>
void ShuffleFixed(const uint8_t* in, size_t first, size_t n, uint8_t* out) {
  for (size_t i = first; i < n; ++i) {
    for (size_t b = 0; b < W; ++b) out[b * n + i] = in[i * W + b];
  }
}

void ShuffleGeneric(const uint8_t* in, size_t n, size_t width, uint8_t* out) {
  for (size_t b = 0; b < width; ++b) {
    for (size_t i = 0; i < n; ++i) out[b * n + i] = in[i * width + b];
  }
}

template <bool kXor>
void UnshuffleScalar(const uint8_t* const* planes, size_t first, size_t n, size_t width, const uint8_t* xor_base,
                     uint8_t* out) {
  for (size_t i = first; i < n; ++i) {
    for (size_t b = 0; b < width; ++b) {
      const uint8_t v = planes[b][i];
      out[i * width + b] = kXor ? static_cast<uint8_t>(xor_base[i * width + b] ^ v) : v;
    }
  }
}

template <bool kXor>
void UnsplitScalar(const uint8_t* low, const uint8_t* high, size_t first, size_t n, const uint8_t* xor_base,
                   uint8_t* out) {
  for (size_t i = first; i < n; ++i) {
    uint16_t v = RotateRight1(static_cast<uint16_t>(low[i] | (high[i] << 8)));
    if (kXor) {
      uint16_t base;
      std::memcpy(&base, xor_base + 2 * i, 2);
      v ^= base;
    }
    std::memcpy(out + 2 * i, &v, 2);
  }
}

// The trailing partial element (or the whole of a width-1 buffer).
template <bool kXor>
void CopyTail(const uint8_t* tail, size_t offset, size_t size, const uint8_t* xor_base, uint8_t* out) {
  if (offset >= size) return;
  if (kXor) {
    XorBytes(xor_base + offset, tail, size - offset, out + offset);
  } else {
    std::memmove(out + offset, tail, size - offset);
  }
}

#if defined(__SSE2__)

inline __m128i Load(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline void Store(uint8_t* p, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); }
template <bool kXor>
inline void StoreXor(uint8_t* p, const uint8_t* base, __m128i v) {
  Store(p, kXor ? _mm_xor_si128(v, Load(base)) : v);
}

// 16 elements per iteration; returns the first element left to the scalar
// loop. The byte of plane b is bits 8b..8b+7 of each 32-bit lane: shifted
// down and masked it is a value 0..255, which the two packs keep exactly.
size_t Shuffle4Sse2(const uint8_t* in, size_t n, uint8_t* out) {
  const __m128i low_byte = _mm_set1_epi32(0xff);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const uint8_t* p = in + 4 * i;
    const __m128i v0 = Load(p), v1 = Load(p + 16), v2 = Load(p + 32), v3 = Load(p + 48);
    for (int b = 0; b < 4; ++b) {
      const __m128i shift = _mm_cvtsi32_si128(8 * b);
      const __m128i a0 = _mm_and_si128(_mm_srl_epi32(v0, shift), low_byte);
      const __m128i a1 = _mm_and_si128(_mm_srl_epi32(v1, shift), low_byte);
      const __m128i a2 = _mm_and_si128(_mm_srl_epi32(v2, shift), low_byte);
      const __m128i a3 = _mm_and_si128(_mm_srl_epi32(v3, shift), low_byte);
      Store(out + b * n + i, _mm_packus_epi16(_mm_packs_epi32(a0, a1), _mm_packs_epi32(a2, a3)));
    }
  }
  return i;
}

// Two planes of 16-bit values, optionally rotated left by one bit first.
template <bool kRotate>
size_t Shuffle2Sse2(const uint8_t* in, size_t n, uint8_t* out) {
  const __m128i low_byte = _mm_set1_epi16(0xff);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i v0 = Load(in + 2 * i), v1 = Load(in + 2 * i + 16);
    if (kRotate) {
      v0 = _mm_or_si128(_mm_slli_epi16(v0, 1), _mm_srli_epi16(v0, 15));
      v1 = _mm_or_si128(_mm_slli_epi16(v1, 1), _mm_srli_epi16(v1, 15));
    }
    Store(out + i, _mm_packus_epi16(_mm_and_si128(v0, low_byte), _mm_and_si128(v1, low_byte)));
    Store(out + n + i, _mm_packus_epi16(_mm_srli_epi16(v0, 8), _mm_srli_epi16(v1, 8)));
  }
  return i;
}

// Interleaving bytes of planes 0/1 and 2/3 gives byte pairs; interleaving
// the pairs gives whole elements, 4 per register.
template <bool kXor>
size_t Unshuffle4Sse2(const uint8_t* const* planes, size_t n, const uint8_t* xor_base, uint8_t* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i p0 = Load(planes[0] + i), p1 = Load(planes[1] + i);
    const __m128i p2 = Load(planes[2] + i), p3 = Load(planes[3] + i);
    const __m128i t0 = _mm_unpacklo_epi8(p0, p1), t1 = _mm_unpackhi_epi8(p0, p1);
    const __m128i t2 = _mm_unpacklo_epi8(p2, p3), t3 = _mm_unpackhi_epi8(p2, p3);
    uint8_t* o = out + 4 * i;
    const uint8_t* x = kXor ? xor_base + 4 * i : nullptr;
    StoreXor<kXor>(o, x, _mm_unpacklo_epi16(t0, t2));
    StoreXor<kXor>(o + 16, x + (kXor ? 16 : 0), _mm_unpackhi_epi16(t0, t2));
    StoreXor<kXor>(o + 32, x + (kXor ? 32 : 0), _mm_unpacklo_epi16(t1, t3));
    StoreXor<kXor>(o + 48, x + (kXor ? 48 : 0), _mm_unpackhi_epi16(t1, t3));
  }
  return i;
}

template <bool kXor, bool kRotate>
size_t Unshuffle2Sse2(const uint8_t* low, const uint8_t* high, size_t n, const uint8_t* xor_base, uint8_t* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i l = Load(low + i), h = Load(high + i);
    __m128i v0 = _mm_unpacklo_epi8(l, h), v1 = _mm_unpackhi_epi8(l, h);
    if (kRotate) {
      v0 = _mm_or_si128(_mm_srli_epi16(v0, 1), _mm_slli_epi16(v0, 15));
      v1 = _mm_or_si128(_mm_srli_epi16(v1, 1), _mm_slli_epi16(v1, 15));
    }
    const uint8_t* x = kXor ? xor_base + 2 * i : nullptr;
    StoreXor<kXor>(out + 2 * i, x, v0);
    StoreXor<kXor>(out + 2 * i + 16, x + (kXor ? 16 : 0), v1);
  }
  return i;
}

#else

size_t Shuffle4Sse2(const uint8_t*, size_t, uint8_t*) { return 0; }
template <bool kRotate>
size_t Shuffle2Sse2(const uint8_t*, size_t, uint8_t*) {
  return 0;
}
template <bool kXor>
size_t Unshuffle4Sse2(const uint8_t* const*, size_t, const uint8_t*, uint8_t*) {
  return 0;
}
template <bool kXor, bool kRotate>
size_t Unshuffle2Sse2(const uint8_t*, const uint8_t*, size_t, const uint8_t*, uint8_t*) {
  return 0;
}

#endif

template <bool kXor>
void UnshuffleImpl(const uint8_t* const* planes, const uint8_t* tail, size_t size, size_t width,
                   const uint8_t* xor_base, uint8_t* out) {
  if (width <= 1) return CopyTail<kXor>(planes[0], 0, size, xor_base, out);
  const size_t n = size / width;
  size_t first = 0;
  if (width == 4) first = Unshuffle4Sse2<kXor>(planes, n, xor_base, out);
  if (width == 2) first = Unshuffle2Sse2<kXor, /*kRotate=*/false>(planes[0], planes[1], n, xor_base, out);
  UnshuffleScalar<kXor>(planes, first, n, width, xor_base, out);
  CopyTail<kXor>(tail, n * width, size, xor_base, out);
}

template <bool kXor>
void UnsplitImpl(const uint8_t* low, const uint8_t* high, const uint8_t* tail, size_t size, const uint8_t* xor_base,
                 uint8_t* out) {
  const size_t n = size / 2;
  const size_t first = Unshuffle2Sse2<kXor, /*kRotate=*/true>(low, high, n, xor_base, out);
  UnsplitScalar<kXor>(low, high, first, n, xor_base, out);
  CopyTail<kXor>(tail, 2 * n, size, xor_base, out);
}

}  // namespace

void ShuffleBytes(const uint8_t* in, size_t size, size_t width, uint8_t* out) {
  if (width <= 1) {
    if (size) std::memcpy(out, in, size);
    return;
  }
  const size_t n = size / width;
  switch (width) {
    case 2: ShuffleFixed<2>(in, Shuffle2Sse2</*kRotate=*/false>(in, n, out), n, out); break;
    case 4: ShuffleFixed<4>(in, Shuffle4Sse2(in, n, out), n, out); break;
    case 8: ShuffleFixed<8>(in, 0, n, out); break;
    default: ShuffleGeneric(in, n, width, out);
  }
  if (size > n * width) std::memcpy(out + n * width, in + n * width, size - n * width);
}

void UnshufflePlanes(const uint8_t* const* planes, const uint8_t* tail, size_t size, size_t width,
                     const uint8_t* xor_base, uint8_t* out) {
  if (xor_base) return UnshuffleImpl<true>(planes, tail, size, width, xor_base, out);
  UnshuffleImpl<false>(planes, tail, size, width, nullptr, out);
}

void UnshuffleBytes(const uint8_t* in, size_t size, size_t width, uint8_t* out) {
  const size_t w = width < 1 ? 1 : width;
  const size_t n = size / w;
  const uint8_t* planes[16];
  if (w > 16) {  // not a width the codec uses: the plain loop
    for (size_t b = 0; b < w; ++b) {
      for (size_t i = 0; i < n; ++i) out[i * w + b] = in[b * n + i];
    }
    if (size > n * w) std::memcpy(out + n * w, in + n * w, size - n * w);
    return;
  }
  for (size_t b = 0; b < w; ++b) planes[b] = in + b * n;
  UnshufflePlanes(planes, in + n * w, size, w, nullptr, out);
}

void SplitFloat16(const uint8_t* in, size_t size, uint8_t* out) {
  const size_t n = size / 2;
  for (size_t i = Shuffle2Sse2</*kRotate=*/true>(in, n, out); i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, in + 2 * i, 2);
    v = RotateLeft1(v);
    out[i] = static_cast<uint8_t>(v & 0xff);
    out[n + i] = static_cast<uint8_t>(v >> 8);
  }
  if (size & 1) out[size - 1] = in[size - 1];
}

void UnsplitFloat16Planes(const uint8_t* low, const uint8_t* high, const uint8_t* tail, size_t size,
                          const uint8_t* xor_base, uint8_t* out) {
  if (xor_base) return UnsplitImpl<true>(low, high, tail, size, xor_base, out);
  UnsplitImpl<false>(low, high, tail, size, nullptr, out);
}

void UnsplitFloat16(const uint8_t* in, size_t size, uint8_t* out) {
  const size_t n = size / 2;
  UnsplitFloat16Planes(in, in + n, in + 2 * n, size, nullptr, out);
}

void XorBytes(const uint8_t* a, const uint8_t* b, size_t size, uint8_t* out) {
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t x, y;
    std::memcpy(&x, a + i, 8);
    std::memcpy(&y, b + i, 8);
    x ^= y;
    std::memcpy(out + i, &x, 8);
  }
  for (; i < size; ++i) out[i] = static_cast<uint8_t>(a[i] ^ b[i]);
}

}  // namespace trainsnap::internal
