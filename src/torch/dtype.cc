#include "torch/dtype.h"

#include <string>

namespace trainsnap::internal {

Result<DType> ToDType(c10::ScalarType type) {
  switch (type) {
    case c10::kFloat: return DType::kFloat32;
    case c10::kDouble: return DType::kFloat64;
    case c10::kHalf: return DType::kFloat16;
    case c10::kBFloat16: return DType::kBFloat16;
    case c10::kChar: return DType::kInt8;
    case c10::kByte: return DType::kUInt8;
    case c10::kShort: return DType::kInt16;
    case c10::kInt: return DType::kInt32;
    case c10::kLong: return DType::kInt64;
    case c10::kBool: return DType::kBool;
    case c10::kComplexFloat: return DType::kComplex64;
    case c10::kComplexDouble: return DType::kComplex128;
    default:
      return Status::NotSupported(std::string("tensor dtype ") + c10::toString(type) +
                                  " cannot be stored");
  }
}

Result<c10::ScalarType> ToScalarType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return c10::kFloat;
    case DType::kFloat64: return c10::kDouble;
    case DType::kFloat16: return c10::kHalf;
    case DType::kBFloat16: return c10::kBFloat16;
    case DType::kInt8: return c10::kChar;
    case DType::kUInt8: return c10::kByte;
    case DType::kInt16: return c10::kShort;
    case DType::kInt32: return c10::kInt;
    case DType::kInt64: return c10::kLong;
    case DType::kBool: return c10::kBool;
    case DType::kComplex64: return c10::kComplexFloat;
    case DType::kComplex128: return c10::kComplexDouble;
    case DType::kUnknown: break;
  }
  return Status::NotSupported("dtype code " + std::to_string(static_cast<uint32_t>(dtype)) +
                              " has no LibTorch type");
}

}  // namespace trainsnap::internal
