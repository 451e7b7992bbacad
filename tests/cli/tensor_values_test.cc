// diff's value comparison without LibTorch (cli/tensor_values.h): exact
// widening per dtype, and the same results as the LibTorch computation it
// replaced (kept here as the reference).
#include "cli/tensor_values.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace trainsnap::cli {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Same double, NaN equal to NaN of the same sign.
void ExpectSameDouble(double got, double want, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": " << got;
    EXPECT_EQ(std::signbit(got), std::signbit(want)) << what;
  } else {
    EXPECT_EQ(got, want) << what;
    EXPECT_EQ(std::signbit(got), std::signbit(want)) << what;
  }
}

TEST(HalfToDoubleTest, ExactValues) {
  ExpectSameDouble(HalfToDouble(0x0000), 0.0, "+0");
  ExpectSameDouble(HalfToDouble(0x8000), -0.0, "-0");
  ExpectSameDouble(HalfToDouble(0x0001), std::ldexp(1.0, -24), "smallest subnormal");
  ExpectSameDouble(HalfToDouble(0x8001), -std::ldexp(1.0, -24), "negative subnormal");
  ExpectSameDouble(HalfToDouble(0x03ff), 1023 * std::ldexp(1.0, -24), "largest subnormal");
  ExpectSameDouble(HalfToDouble(0x0400), std::ldexp(1.0, -14), "smallest normal");
  ExpectSameDouble(HalfToDouble(0x3c00), 1.0, "1");
  ExpectSameDouble(HalfToDouble(0x3c01), 1.0 + std::ldexp(1.0, -10), "1 + ulp");
  ExpectSameDouble(HalfToDouble(0xc000), -2.0, "-2");
  ExpectSameDouble(HalfToDouble(0x3555), 0.333251953125, "1/3 rounded");
  ExpectSameDouble(HalfToDouble(0x7bff), 65504.0, "max");
  ExpectSameDouble(HalfToDouble(0x7c00), kInf, "+inf");
  ExpectSameDouble(HalfToDouble(0xfc00), -kInf, "-inf");
  EXPECT_TRUE(std::isnan(HalfToDouble(0x7e00)));
  EXPECT_TRUE(std::isnan(HalfToDouble(0x7c01)));  // signalling NaN bits
  EXPECT_TRUE(std::isnan(HalfToDouble(0xfe00)));
}

TEST(BFloat16ToDoubleTest, ExactValues) {
  ExpectSameDouble(BFloat16ToDouble(0x0000), 0.0, "+0");
  ExpectSameDouble(BFloat16ToDouble(0x8000), -0.0, "-0");
  ExpectSameDouble(BFloat16ToDouble(0x0001), std::ldexp(1.0, -133), "smallest subnormal");
  ExpectSameDouble(BFloat16ToDouble(0x007f), 127 * std::ldexp(1.0, -133), "largest subnormal");
  ExpectSameDouble(BFloat16ToDouble(0x0080), std::ldexp(1.0, -126), "smallest normal");
  ExpectSameDouble(BFloat16ToDouble(0x3f80), 1.0, "1");
  ExpectSameDouble(BFloat16ToDouble(0x4049), 3.140625, "pi rounded");
  ExpectSameDouble(BFloat16ToDouble(0xc1a0), -20.0, "-20");
  ExpectSameDouble(BFloat16ToDouble(0x7f7f), (2.0 - std::ldexp(1.0, -7)) * std::ldexp(1.0, 127), "max");
  ExpectSameDouble(BFloat16ToDouble(0x7f80), kInf, "+inf");
  ExpectSameDouble(BFloat16ToDouble(0xff80), -kInf, "-inf");
  EXPECT_TRUE(std::isnan(BFloat16ToDouble(0x7fc0)));
  EXPECT_TRUE(std::isnan(BFloat16ToDouble(0x7f81)));
}

// Every one of the 65536 bit patterns widens as LibTorch's .to(kFloat64) does.
TEST(HalfToDoubleTest, EveryBitPatternMatchesLibTorch) {
  for (torch::ScalarType type : {torch::kFloat16, torch::kBFloat16}) {
    torch::Tensor bits = torch::arange(0, 65536, torch::kInt32).to(torch::kInt16);
    torch::Tensor wide = bits.view(type).to(torch::kFloat64).contiguous();
    const double* expected = wide.data_ptr<double>();
    for (uint32_t b = 0; b < 65536; ++b) {
      const uint16_t bits16 = static_cast<uint16_t>(b);
      double got = type == torch::kFloat16 ? HalfToDouble(bits16) : BFloat16ToDouble(bits16);
      if (std::isnan(expected[b])) {
        ASSERT_TRUE(std::isnan(got)) << type << " bits " << b;
      } else {
        ASSERT_EQ(got, expected[b]) << type << " bits " << b;
        ASSERT_EQ(std::signbit(got), std::signbit(expected[b])) << type << " bits " << b;
      }
    }
  }
}

TEST(ElementAsDoubleTest, EveryRealDTypeExactly) {
  auto i8 = Bytes<int8_t>({-128, 127});
  EXPECT_EQ(ElementAsDouble(DType::kInt8, i8.data(), 0), -128.0);
  EXPECT_EQ(ElementAsDouble(DType::kInt8, i8.data(), 1), 127.0);
  auto u8 = Bytes<uint8_t>({0, 255});
  EXPECT_EQ(ElementAsDouble(DType::kUInt8, u8.data(), 1), 255.0);
  auto i16 = Bytes<int16_t>({-32768, 32767});
  EXPECT_EQ(ElementAsDouble(DType::kInt16, i16.data(), 0), -32768.0);
  auto i32 = Bytes<int32_t>({std::numeric_limits<int32_t>::min(), 7});
  EXPECT_EQ(ElementAsDouble(DType::kInt32, i32.data(), 0), -2147483648.0);
  auto i64 = Bytes<int64_t>({(int64_t{1} << 53) + 1, std::numeric_limits<int64_t>::min(), -5});
  EXPECT_EQ(ElementAsDouble(DType::kInt64, i64.data(), 0), 9007199254740992.0);  // rounded to even
  EXPECT_EQ(ElementAsDouble(DType::kInt64, i64.data(), 1), -9223372036854775808.0);
  EXPECT_EQ(ElementAsDouble(DType::kInt64, i64.data(), 2), -5.0);
  auto b = Bytes<uint8_t>({0, 1});
  EXPECT_EQ(ElementAsDouble(DType::kBool, b.data(), 0), 0.0);
  EXPECT_EQ(ElementAsDouble(DType::kBool, b.data(), 1), 1.0);
  auto f32 = Bytes<float>({0.1f, -std::numeric_limits<float>::denorm_min()});
  EXPECT_EQ(ElementAsDouble(DType::kFloat32, f32.data(), 0), static_cast<double>(0.1f));
  EXPECT_EQ(ElementAsDouble(DType::kFloat32, f32.data(), 1), -std::ldexp(1.0, -149));
  auto f64 = Bytes<double>({0.1, -kInf});
  EXPECT_EQ(ElementAsDouble(DType::kFloat64, f64.data(), 0), 0.1);
  EXPECT_EQ(ElementAsDouble(DType::kFloat64, f64.data(), 1), -kInf);
  auto h = Bytes<uint16_t>({0x3555, 0x0001});
  EXPECT_EQ(ElementAsDouble(DType::kFloat16, h.data(), 0), 0.333251953125);
  EXPECT_EQ(ElementAsDouble(DType::kFloat16, h.data(), 1), std::ldexp(1.0, -24));
  auto bf = Bytes<uint16_t>({0x4049});
  EXPECT_EQ(ElementAsDouble(DType::kBFloat16, bf.data(), 0), 3.140625);
}

TEST(ElementAsComplexTest, ComplexAndRealDTypes) {
  auto c64 = Bytes<float>({1.5f, -2.25f, 0.1f, 3.0f});
  EXPECT_EQ(ElementAsComplex(DType::kComplex64, c64.data(), 1), std::complex<double>(0.1f, 3.0));
  auto c128 = Bytes<double>({0.1, -0.2});
  EXPECT_EQ(ElementAsComplex(DType::kComplex128, c128.data(), 0), std::complex<double>(0.1, -0.2));
  auto i32 = Bytes<int32_t>({-9});
  EXPECT_EQ(ElementAsComplex(DType::kInt32, i32.data(), 0), std::complex<double>(-9.0, 0.0));
}

TEST(CompareValuesTest, ExactResultsPerDType) {
  {  // float16: 1 -> 1.5 and 0.5 -> 0.25 differ; NaN on both sides is the same
    auto a = Bytes<uint16_t>({0x3c00, 0x3800, 0x7e00, 0x0001});
    auto b = Bytes<uint16_t>({0x3e00, 0x3400, 0x7e00, 0x0001});
    auto r = CompareValues(DType::kFloat16, a.data(), b.data(), 4);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->max_abs_diff, 0.5);
    EXPECT_FALSE(r->relative_l2.has_value());  // ||a|| is NaN: undefined
  }
  {  // float16 without NaN: ||b-a|| / ||a|| = sqrt(0.25 + 0.0625) / sqrt(1 + 0.25)
    auto a = Bytes<uint16_t>({0x3c00, 0x3800});
    auto b = Bytes<uint16_t>({0x3e00, 0x3400});
    auto r = CompareValues(DType::kFloat16, a.data(), b.data(), 2);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->max_abs_diff, 0.5);
    ASSERT_TRUE(r->relative_l2.has_value());
    EXPECT_DOUBLE_EQ(*r->relative_l2, std::sqrt(0.3125) / std::sqrt(1.25));
  }
  {  // bfloat16: 3.140625 -> -20
    auto a = Bytes<uint16_t>({0x4049, 0x3f80});
    auto b = Bytes<uint16_t>({0xc1a0, 0x3f80});
    auto r = CompareValues(DType::kBFloat16, a.data(), b.data(), 2);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->max_abs_diff, 23.140625);
  }
  {  // bool: a flipped element differs by exactly 1
    auto a = Bytes<uint8_t>({0, 1, 1});
    auto b = Bytes<uint8_t>({1, 1, 1});
    auto r = CompareValues(DType::kBool, a.data(), b.data(), 3);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->max_abs_diff, 1.0);
    EXPECT_DOUBLE_EQ(*r->relative_l2, 1.0 / std::sqrt(2.0));
  }
  {  // int8 / uint8 / int16 / int32 extremes
    auto a8 = Bytes<int8_t>({-128, 0}), b8 = Bytes<int8_t>({127, 0});
    EXPECT_EQ(CompareValues(DType::kInt8, a8.data(), b8.data(), 2)->max_abs_diff, 255.0);
    auto au = Bytes<uint8_t>({255}), bu = Bytes<uint8_t>({0});
    EXPECT_EQ(CompareValues(DType::kUInt8, au.data(), bu.data(), 1)->max_abs_diff, 255.0);
    auto a16 = Bytes<int16_t>({-32768}), b16 = Bytes<int16_t>({32767});
    EXPECT_EQ(CompareValues(DType::kInt16, a16.data(), b16.data(), 1)->max_abs_diff, 65535.0);
    auto a32 = Bytes<int32_t>({std::numeric_limits<int32_t>::min()}), b32 = Bytes<int32_t>({std::numeric_limits<int32_t>::max()});
    EXPECT_EQ(CompareValues(DType::kInt32, a32.data(), b32.data(), 1)->max_abs_diff, 4294967295.0);
  }
  {  // int64: values that widen to one double compare equal, as in float64
    auto a = Bytes<int64_t>({int64_t{1} << 53, 10});
    auto b = Bytes<int64_t>({(int64_t{1} << 53) + 1, 10});
    auto r = CompareValues(DType::kInt64, a.data(), b.data(), 2);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->max_abs_diff, 0.0);
    EXPECT_EQ(r->relative_l2, 0.0);
  }
  {  // float32 / float64: +0 equals -0; inf equals inf; inf vs -inf is inf
    auto a = Bytes<float>({0.0f, std::numeric_limits<float>::infinity(), 1.0f});
    auto b = Bytes<float>({-0.0f, std::numeric_limits<float>::infinity(), 1.0f});
    auto r = CompareValues(DType::kFloat32, a.data(), b.data(), 3);
    EXPECT_EQ(r->max_abs_diff, 0.0);
    EXPECT_EQ(r->relative_l2, 0.0);
    auto c = Bytes<double>({kInf, 2.0}), d = Bytes<double>({-kInf, 2.0});
    auto r2 = CompareValues(DType::kFloat64, c.data(), d.data(), 2);
    EXPECT_EQ(r2->max_abs_diff, kInf);
  }
  {  // NaN on one side only: max_abs_diff NaN, relative_l2 undefined
    auto a = Bytes<double>({1.0, std::nan("")}), b = Bytes<double>({3.0, 0.0});
    auto r = CompareValues(DType::kFloat64, a.data(), b.data(), 2);
    EXPECT_TRUE(std::isnan(r->max_abs_diff));
    EXPECT_FALSE(r->relative_l2.has_value());
  }
  {  // complex64: |(4+6i) - (1+2i)| = 5; NaN in either part on both sides is the same
    auto a = Bytes<float>({1, 2, std::nanf(""), 0, 7, 7});
    auto b = Bytes<float>({4, 6, 0, std::nanf(""), 7, 7});
    auto r = CompareValues(DType::kComplex64, a.data(), b.data(), 3);
    EXPECT_EQ(r->max_abs_diff, 5.0);
    EXPECT_FALSE(r->relative_l2.has_value());  // ||a|| is NaN
  }
  {  // complex128: |d| = hypot, no overflow for large parts
    auto a = Bytes<double>({0, 0, 3e300, 0}), b = Bytes<double>({3, 4, 0, 4e300});
    auto r = CompareValues(DType::kComplex128, a.data(), b.data(), 2);
    EXPECT_EQ(r->max_abs_diff, std::hypot(3e300, 4e300));
  }
  {  // an empty tensor: nothing differs
    auto r = CompareValues(DType::kFloat32, nullptr, nullptr, 0);
    EXPECT_EQ(r->max_abs_diff, 0.0);
    EXPECT_EQ(r->relative_l2, 0.0);
  }
  auto bad = CompareValues(DType::kUnknown, nullptr, nullptr, 0);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

// The LibTorch computation diff used before (float64 / complex128 slices):
// the reference for the randomized comparison below.
void TorchReference(const torch::Tensor& a, const torch::Tensor& b, double& max_abs, std::optional<double>& rel) {
  const bool complex = a.is_complex();
  torch::Tensor sa = a.reshape({-1}).to(complex ? torch::kComplexDouble : torch::kFloat64);
  torch::Tensor sb = b.reshape({-1}).to(complex ? torch::kComplexDouble : torch::kFloat64);
  torch::Tensor same = sa.eq(sb).logical_or(sa.isnan().logical_and(sb.isnan()));
  torch::Tensor d = torch::where(same, torch::zeros({}, sa.options()), sb - sa).abs();
  rel.reset();
  if (d.isnan().any().item<bool>()) {
    max_abs = std::nan("");
    return;
  }
  max_abs = d.max().item<double>();
  double diff_sq = d.square().sum().item<double>(), a_sq = sa.abs().square().sum().item<double>();
  if (diff_sq == 0.0) {
    rel = 0.0;
  } else if (a_sq > 0.0) {
    rel = std::sqrt(diff_sq) / std::sqrt(a_sq);
  }
}

// Random tensors of every dtype with a sprinkle of special values (NaN, inf,
// -0, subnormals): max_abs_diff is bitwise LibTorch's, relative_l2 equal up
// to summation rounding (LibTorch's own sum order depends on its threads).
TEST(CompareValuesTest, MatchesTheLibTorchComputationForEveryDType) {
  const std::vector<std::pair<DType, torch::ScalarType>> types = {
      {DType::kFloat32, torch::kFloat32},     {DType::kFloat64, torch::kFloat64},
      {DType::kFloat16, torch::kFloat16},     {DType::kBFloat16, torch::kBFloat16},
      {DType::kInt8, torch::kInt8},           {DType::kUInt8, torch::kUInt8},
      {DType::kInt16, torch::kInt16},         {DType::kInt32, torch::kInt32},
      {DType::kInt64, torch::kInt64},         {DType::kBool, torch::kBool},
      {DType::kComplex64, torch::kComplexFloat}, {DType::kComplex128, torch::kComplexDouble}};
  std::mt19937 rng(5);
  const int64_t n = 5000;
  for (const auto& [dtype, type] : types) {
    for (int variant = 0; variant < 3; ++variant) {  // 0: plain, 1: special values, 2: NaN on both sides
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " variant " + std::to_string(variant));
      torch::manual_seed(variant * 100 + static_cast<int>(dtype));
      torch::Tensor a, b;
      if (type == torch::kBool) {
        a = torch::randint(0, 2, {n}).to(torch::kBool);
        b = a.clone();
        b.index_put_({torch::randint(0, n, {50})}, true);
      } else if (torch::isIntegralType(type, false)) {
        a = torch::randint(-100, 100, {n}).to(type);
        if (type == torch::kUInt8) a = torch::randint(0, 255, {n}).to(type);
        if (type == torch::kInt64) a = a * (int64_t{1} << 50) + 3;
        b = a.clone();
        b.index_put_({torch::randint(0, n, {50})}, type == torch::kUInt8 ? 7 : -7);
      } else {
        a = torch::randn({n}, torch::TensorOptions().dtype(type));
        b = a + 0.01 * torch::randn({n}, torch::TensorOptions().dtype(type));
        b.index_put_({torch::randint(0, n, {n / 2})}, 0);  // a mix of equal and unequal elements
        b.narrow(0, 0, n / 4).copy_(a.narrow(0, 0, n / 4));
        if (variant >= 1) {
          a.index_put_({1}, std::numeric_limits<double>::infinity());
          b.index_put_({1}, std::numeric_limits<double>::infinity());
          a.index_put_({2}, -0.0);
          b.index_put_({2}, 0.0);
          a.index_put_({3}, 1e-40);  // subnormal in float32 (0 in float16)
          b.index_put_({4}, -std::numeric_limits<double>::infinity());
        }
        if (variant == 2) {
          a.index_put_({5}, std::nan(""));
          b.index_put_({5}, std::nan(""));
        }
        if (variant == 1) b.index_put_({6}, std::nan(""));
      }
      a = a.contiguous();
      b = b.contiguous();
      double want_max = 0;
      std::optional<double> want_rel;
      TorchReference(a, b, want_max, want_rel);
      auto got = CompareValues(dtype, static_cast<const uint8_t*>(a.data_ptr()),
                               static_cast<const uint8_t*>(b.data_ptr()), static_cast<size_t>(n));
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      if (std::isnan(want_max)) {
        EXPECT_TRUE(std::isnan(got->max_abs_diff));
      } else {
        EXPECT_EQ(got->max_abs_diff, want_max);
      }
      ASSERT_EQ(got->relative_l2.has_value(), want_rel.has_value());
      if (want_rel.has_value()) {
        if (std::isnan(*want_rel)) {  // inf / inf
          EXPECT_TRUE(std::isnan(*got->relative_l2));
        } else if (std::isinf(*want_rel) || *want_rel == 0.0) {
          EXPECT_EQ(*got->relative_l2, *want_rel);
        } else {
          EXPECT_NEAR(*got->relative_l2, *want_rel, 1e-12 * *want_rel);
        }
      }
    }
  }
}

}  // namespace
}  // namespace trainsnap::cli
