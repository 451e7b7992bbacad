// Stored tensors as raw bytes, for diff and export.
#pragma once

#include <cstdint>
#include <vector>

#include "trainsnap/store.h"

namespace trainsnap::cli {

// Elements of a tensor of `shape`: Corruption for a negative dimension or a
// count that overflows.
Result<uint64_t> ElementCount(const std::vector<int64_t>& shape);
// Bytes of a contiguous tensor of `dtype` and `shape`: NotSupported for an
// unknown dtype, Corruption for a bad shape or a count that overflows.
Result<uint64_t> ContiguousBytes(DType dtype, const std::vector<int64_t>& shape);
// Reads `record` (verifying every chunk hash) into a new buffer: its
// elements, contiguous, row-major, little-endian. NotSupported for an
// unknown dtype; Corruption when the record's byte count disagrees with its
// shape and dtype.
Result<std::vector<uint8_t>> ReadTensorBytes(Store& store, const TensorRecord& record);

}  // namespace trainsnap::cli
