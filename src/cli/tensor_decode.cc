#include "cli/tensor_decode.h"

#include <limits>
#include <string>

namespace trainsnap::cli {

Result<uint64_t> ElementCount(const std::vector<int64_t>& shape) {
  uint64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) return Status::Corruption("shape has a negative dimension " + std::to_string(d));
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) {
      return Status::Corruption("shape's element count overflows");
    }
    count *= static_cast<uint64_t>(d);
  }
  return count;
}

Result<uint64_t> ContiguousBytes(DType dtype, const std::vector<int64_t>& shape) {
  const uint64_t element_size = DTypeSize(dtype);
  if (element_size == 0) {
    return Status::NotSupported("dtype code " + std::to_string(static_cast<uint32_t>(dtype)) +
                                " is not a known dtype");
  }
  TRAINSNAP_ASSIGN_OR_RETURN(uint64_t elements, ElementCount(shape));
  if (elements > std::numeric_limits<uint64_t>::max() / element_size) {
    return Status::Corruption("shape's byte count overflows");
  }
  return elements * element_size;
}

Result<std::vector<uint8_t>> ReadTensorBytes(Store& store, const TensorRecord& record) {
  TRAINSNAP_ASSIGN_OR_RETURN(uint64_t expected, ContiguousBytes(record.dtype, record.shape));
  if (expected != record.bytes) {
    return Status::Corruption("record says " + std::to_string(record.bytes) + " bytes, shape and dtype give " +
                              std::to_string(expected));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(record.bytes));
  TRAINSNAP_RETURN_IF_ERROR(store.ReadTensor(record, bytes.data(), bytes.size()));
  return bytes;
}

}  // namespace trainsnap::cli
