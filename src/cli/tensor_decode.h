// Stored tensors as LibTorch tensors, for diff and export.
#pragma once

#include <torch/torch.h>

#include "trainsnap/store.h"

namespace trainsnap::cli {

// LibTorch's scalar type for a store dtype; NotSupported for kUnknown.
Result<torch::ScalarType> ScalarTypeOf(DType dtype);
// Reads `record` (verifying every chunk hash) into a new contiguous CPU
// tensor with the record's dtype and shape.
Result<torch::Tensor> ReadAsTorch(Store& store, const TensorRecord& record);

}  // namespace trainsnap::cli
