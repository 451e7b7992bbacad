#include "cli/tensor_decode.h"

#include <string>

namespace trainsnap::cli {

Result<torch::ScalarType> ScalarTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return torch::kFloat32;
    case DType::kFloat64: return torch::kFloat64;
    case DType::kFloat16: return torch::kFloat16;
    case DType::kBFloat16: return torch::kBFloat16;
    case DType::kInt8: return torch::kInt8;
    case DType::kUInt8: return torch::kUInt8;
    case DType::kInt16: return torch::kInt16;
    case DType::kInt32: return torch::kInt32;
    case DType::kInt64: return torch::kInt64;
    case DType::kBool: return torch::kBool;
    case DType::kComplex64: return torch::kComplexFloat;
    case DType::kComplex128: return torch::kComplexDouble;
    case DType::kUnknown: break;
  }
  return Status::NotSupported("dtype code " + std::to_string(static_cast<uint32_t>(dtype)) +
                              " has no LibTorch type");
}

Result<torch::Tensor> ReadAsTorch(Store& store, const TensorRecord& record) {
  TRAINSNAP_ASSIGN_OR_RETURN(torch::ScalarType type, ScalarTypeOf(record.dtype));
  torch::Tensor tensor;
  try {
    tensor = torch::empty(record.shape, torch::TensorOptions().dtype(type).device(torch::kCPU));
  } catch (const c10::Error& e) {
    return Status::Aborted(std::string("allocate tensor: ") + e.what_without_backtrace());
  }
  size_t bytes = static_cast<size_t>(tensor.numel()) * tensor.element_size();
  if (bytes != record.bytes) {
    return Status::Corruption("record says " + std::to_string(record.bytes) + " bytes, shape and dtype give " +
                              std::to_string(bytes));
  }
  TRAINSNAP_RETURN_IF_ERROR(store.ReadTensor(record, tensor.data_ptr(), bytes));
  return tensor;
}

}  // namespace trainsnap::cli
