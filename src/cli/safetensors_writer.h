// Writes a safetensors file (https://github.com/huggingface/safetensors,
// "Format"): an 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
// {string: string}}, then the tensors' bytes, contiguous, without holes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/output_file.h"
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

// Not thread-safe. Writes through an OutputFile (output_file.h): a unique
// temporary file renamed over `path` on Finish(), so a failed export leaves
// no partial file behind, and `path` is refused unless it is absent or a
// regular file.
class SafetensorsWriter {
 public:
  // Orders `entries` by element size (largest first), then name, so that
  // every tensor starts aligned to its element size (the header is padded
  // with spaces to a multiple of 8 bytes), and writes the header.
  static Result<std::unique_ptr<SafetensorsWriter>> Create(std::string path, std::vector<SafetensorsEntry> entries,
                                                           const std::map<std::string, std::string>& metadata);
  ~SafetensorsWriter();  // removes the temporary file unless Finish() succeeded
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Entries in the order the data must be appended.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  // Appends the bytes of entries()[i] for the next i (native byte order is
  // little-endian on every platform LibTorch supports here).
  Status Append(const void* data, size_t bytes);
  // Syncs and renames into place (OutputFile::Commit).
  Status Finish();

 private:
  SafetensorsWriter(std::vector<SafetensorsEntry> entries, std::unique_ptr<OutputFile> file);
  std::vector<SafetensorsEntry> entries_;
  std::unique_ptr<OutputFile> file_;
  size_t next_ = 0;
};

}  // namespace trainsnap::cli
