// Element values of stored tensors without LibTorch: the exact widening of
// every store dtype to float64 (complex128 for complex dtypes), and the
// value comparison `trainsnap diff` reports.
#pragma once

#include <complex>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "trainsnap/dtype.h"
#include "trainsnap/status.h"

namespace trainsnap::cli {

// IEEE 754 binary16 bits to float64, exactly (subnormals, infinities and
// NaN included; a NaN stays a NaN of the same sign).
double HalfToDouble(uint16_t bits);
// bfloat16 bits (the high half of a float32) to float64, exactly.
double BFloat16ToDouble(uint16_t bits);

// True for kComplex64 and kComplex128.
bool IsComplex(DType dtype);

// Element `index` of `data` (little-endian, as the store holds it) widened
// as LibTorch's .to(kFloat64) / .to(kComplexDouble) does: exact for every
// dtype except int64 beyond 2^53 (rounded to nearest); bool is 0 or 1. For
// real dtypes the imaginary part is 0. `dtype` must be a valid code.
std::complex<double> ElementAsComplex(DType dtype, const uint8_t* data, size_t index);
double ElementAsDouble(DType dtype, const uint8_t* data, size_t index);  // real dtypes only

struct ValueDifference {
  // max |b - a| over elements that differ; NaN when an element is NaN on one
  // side only (or its difference is NaN).
  double max_abs_diff = 0.0;
  // ||b - a|| / ||a||: 0 when nothing differs; nullopt when ||a|| is 0 while
  // something differs, or when max_abs_diff is NaN.
  std::optional<double> relative_l2;
};

// Compares `elements` elements of `a` and `b`, both of `dtype`, in float64
// (complex128 for complex dtypes, |z| = hypot(re, im)). Elements equal in
// float64 (so +0 and -0) or NaN on both sides count as equal. Sums of
// squares are compensated (Neumaier), so the result does not depend on the
// order of summation beyond one rounding. InvalidArgument for kUnknown.
Result<ValueDifference> CompareValues(DType dtype, const uint8_t* a, const uint8_t* b, size_t elements);

}  // namespace trainsnap::cli
