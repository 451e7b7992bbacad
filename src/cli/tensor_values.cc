#include "cli/tensor_values.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace trainsnap::cli {

namespace {

template <typename T>
T Load(const uint8_t* data, size_t index) {
  T value;
  std::memcpy(&value, data + index * sizeof(T), sizeof(T));
  return value;
}

// Sum with Neumaier's compensation: exact to about one rounding whatever the
// number of terms.
class CompensatedSum {
 public:
  void Add(double x) {
    double t = sum_ + x;
    if (std::isfinite(t)) {
      compensation_ += std::abs(sum_) >= std::abs(x) ? (sum_ - t) + x : (x - t) + sum_;
    }
    sum_ = t;
  }
  double value() const { return std::isfinite(sum_) ? sum_ + compensation_ : sum_; }

 private:
  double sum_ = 0.0;
  double compensation_ = 0.0;
};

}  // namespace

double HalfToDouble(uint16_t bits) {
  const bool negative = (bits & 0x8000u) != 0;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  double magnitude;
  if (exponent == 0x1f) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), -24);  // subnormal (or zero)
  } else {
    magnitude = std::ldexp(static_cast<double>(0x400 | mantissa), exponent - 25);
  }
  return negative ? -magnitude : magnitude;
}

double BFloat16ToDouble(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return static_cast<double>(value);
}

bool IsComplex(DType dtype) { return dtype == DType::kComplex64 || dtype == DType::kComplex128; }

double ElementAsDouble(DType dtype, const uint8_t* data, size_t index) {
  switch (dtype) {
    case DType::kFloat32: return Load<float>(data, index);
    case DType::kFloat64: return Load<double>(data, index);
    case DType::kFloat16: return HalfToDouble(Load<uint16_t>(data, index));
    case DType::kBFloat16: return BFloat16ToDouble(Load<uint16_t>(data, index));
    case DType::kInt8: return Load<int8_t>(data, index);
    case DType::kUInt8: return Load<uint8_t>(data, index);
    case DType::kInt16: return Load<int16_t>(data, index);
    case DType::kInt32: return Load<int32_t>(data, index);
    case DType::kInt64: return static_cast<double>(Load<int64_t>(data, index));
    case DType::kBool: return Load<uint8_t>(data, index) != 0 ? 1.0 : 0.0;
    case DType::kComplex64:
    case DType::kComplex128:
    case DType::kUnknown: break;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::complex<double> ElementAsComplex(DType dtype, const uint8_t* data, size_t index) {
  if (dtype == DType::kComplex64) {
    return {Load<float>(data, 2 * index), Load<float>(data, 2 * index + 1)};
  }
  if (dtype == DType::kComplex128) {
    return {Load<double>(data, 2 * index), Load<double>(data, 2 * index + 1)};
  }
  return {ElementAsDouble(dtype, data, index), 0.0};
}

Result<ValueDifference> CompareValues(DType dtype, const uint8_t* a, const uint8_t* b, size_t elements) {
  if (DTypeSize(dtype) == 0) {
    return Status::InvalidArgument("compare values: dtype code " + std::to_string(static_cast<uint32_t>(dtype)) +
                                   " is not a known dtype");
  }
  const bool complex = IsComplex(dtype);
  double max_abs = 0.0;
  bool nan = false;
  CompensatedSum diff_sq, a_sq;
  for (size_t i = 0; i < elements; ++i) {
    double d, magnitude_a;
    if (complex) {
      const std::complex<double> x = ElementAsComplex(dtype, a, i), y = ElementAsComplex(dtype, b, i);
      const bool x_nan = std::isnan(x.real()) || std::isnan(x.imag());
      const bool y_nan = std::isnan(y.real()) || std::isnan(y.imag());
      const bool same = x == y || (x_nan && y_nan);
      d = same ? 0.0 : std::hypot(y.real() - x.real(), y.imag() - x.imag());
      magnitude_a = std::hypot(x.real(), x.imag());
    } else {
      const double x = ElementAsDouble(dtype, a, i), y = ElementAsDouble(dtype, b, i);
      const bool same = x == y || (std::isnan(x) && std::isnan(y));
      d = same ? 0.0 : std::abs(y - x);
      magnitude_a = std::abs(x);
    }
    if (std::isnan(d)) nan = true;
    max_abs = std::max(max_abs, d);
    diff_sq.Add(d * d);
    a_sq.Add(magnitude_a * magnitude_a);
  }
  ValueDifference out;
  if (nan) {
    out.max_abs_diff = std::numeric_limits<double>::quiet_NaN();
    return out;
  }
  out.max_abs_diff = max_abs;
  const double dsq = diff_sq.value(), asq = a_sq.value();
  if (dsq == 0.0) {
    out.relative_l2 = 0.0;
  } else if (asq > 0.0) {
    out.relative_l2 = std::sqrt(dsq) / std::sqrt(asq);
  }
  return out;
}

}  // namespace trainsnap::cli
