// Element types as the store knows them: a stable code per dtype, persisted
// in tensor records, independent of LibTorch's ScalarType numbering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainsnap/export.h"

namespace trainsnap {

// Persisted values: never renumber, only append.
enum class DType : uint32_t {
  kUnknown = 0,
  kFloat32 = 1,
  kFloat64 = 2,
  kFloat16 = 3,
  kBFloat16 = 4,
  kInt8 = 5,
  kUInt8 = 6,
  kInt16 = 7,
  kInt32 = 8,
  kInt64 = 9,
  kBool = 10,
  kComplex64 = 11,
  kComplex128 = 12,
};

// Bytes per element; 0 for kUnknown or an out-of-range code.
TRAINSNAP_EXPORT size_t DTypeSize(DType dtype);

// "float32", "bfloat16", ...; "unknown" for anything else.
TRAINSNAP_EXPORT std::string_view DTypeName(DType dtype);

// True for every named code above except kUnknown.
TRAINSNAP_EXPORT bool IsValidDType(uint32_t code);

}  // namespace trainsnap
