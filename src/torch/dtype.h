// Mapping between LibTorch's ScalarType and the store's persisted DType codes.
#pragma once

#include <c10/core/ScalarType.h>

#include "trainsnap/dtype.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

// NotSupported for scalar types the store has no code for (quantized, ...).
Result<DType> ToDType(c10::ScalarType type);
// NotSupported for kUnknown or codes this build does not know.
Result<c10::ScalarType> ToScalarType(DType dtype);

}  // namespace trainsnap::internal
