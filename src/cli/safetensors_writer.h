// Writes a safetensors file (https://github.com/huggingface/safetensors,
// "Format"): an 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
// {string: string}}, then the tensors' bytes, contiguous, without holes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "trainsnap/store.h"

namespace trainsnap::cli {

// "F32", "BF16", ...; NotSupported for dtypes safetensors has no name for here
// (complex) and for kUnknown.
Result<std::string> SafetensorsDType(DType dtype);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kUnknown;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
};

// Not thread-safe. Writes to `path` + ".tmp" and renames on Finish(), so a
// failed export leaves no partial file behind.
class SafetensorsWriter {
 public:
  // Orders `entries` by element size (largest first), then name, so that
  // every tensor starts aligned to its element size (the header is padded
  // with spaces to a multiple of 8 bytes), and writes the header.
  static Result<std::unique_ptr<SafetensorsWriter>> Create(std::string path, std::vector<SafetensorsEntry> entries,
                                                           const std::map<std::string, std::string>& metadata);
  ~SafetensorsWriter();  // removes the temporary file unless Finish() succeeded

  // Entries in the order the data must be appended.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  // Appends the bytes of entries()[i] for the next i (native byte order is
  // little-endian on every platform LibTorch supports here).
  Status Append(const void* data, size_t bytes);
  // Flushes, syncs and renames into place.
  Status Finish();

 private:
  SafetensorsWriter(std::string path, std::vector<SafetensorsEntry> entries, std::FILE* file);
  std::string path_;
  std::string tmp_path_;
  std::vector<SafetensorsEntry> entries_;
  std::FILE* file_;
  size_t next_ = 0;
  bool finished_ = false;
};

}  // namespace trainsnap::cli
