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

Result<std::vector<uint8_t>> ReadTensorBytes(Store& store, const TensorRecord& record) {
  const size_t element_size = DTypeSize(record.dtype);
  if (element_size == 0) {
    return Status::NotSupported("dtype code " + std::to_string(static_cast<uint32_t>(record.dtype)) +
                                " is not a known dtype");
  }
  TRAINSNAP_ASSIGN_OR_RETURN(uint64_t elements, ElementCount(record.shape));
  if (elements > std::numeric_limits<uint64_t>::max() / element_size || elements * element_size != record.bytes) {
    return Status::Corruption("record says " + std::to_string(record.bytes) + " bytes, shape and dtype give " +
                              (elements > std::numeric_limits<uint64_t>::max() / element_size
                                   ? std::string("more than 2^64")
                                   : std::to_string(elements * element_size)));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(record.bytes));
  TRAINSNAP_RETURN_IF_ERROR(store.ReadTensor(record, bytes.data(), bytes.size()));
  return bytes;
}

}  // namespace trainsnap::cli
