// Writes tensors as a plain dict {name: tensor} in the file format of
// torch.save and torch::pickle_save, without LibTorch: Python's torch.load
// (weights_only=True included) returns a dict of tensors that
// load_state_dict and safetensors.torch.save_file take as is; LibTorch reads
// it with torch::pickle_load(bytes).toGenericDict(). Nothing else is in the
// dict (no step, no names list), so that it loads as a state dict.
//
// Layout (PyTorch's serialization notes, torch/serialization.py): a zip
// archive of stored (uncompressed) entries, each entry's data aligned to 64
// bytes, all under the folder "archive/":
//   archive/data.pkl   pickle protocol 2: a dict whose values are
//                      torch._utils._rebuild_tensor_v2(storage, 0, size,
//                      stride, False, collections.OrderedDict()), each
//                      storage a persistent id ("storage", torch.<T>Storage,
//                      "<key>", "cpu", numel)
//   archive/data/<key> the storage's raw bytes (little-endian), key 0, 1, ...
//   archive/version    "3\n"
// Zip64 records are written where a size or offset needs them (> 4 GiB).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/output_file.h"
#include "trainsnap/store.h"

namespace trainsnap::cli {

// "FloatStorage", "BFloat16Storage", ...: the torch class that names a
// storage of `dtype` in the pickle; NotSupported for kUnknown.
Result<std::string> TorchStorageClass(DType dtype);

struct TorchArchiveEntry {
  std::string name;  // the dict key; valid UTF-8
  DType dtype = DType::kUnknown;
  std::vector<int64_t> shape;  // contiguous, row-major
  uint64_t bytes = 0;
};

// The data.pkl pickle for `entries`, in this order (exposed for tests).
// InvalidArgument for a name that is not valid UTF-8 or bytes that disagree
// with dtype and shape; NotSupported for kUnknown.
Result<std::string> TorchStateDictPickle(const std::vector<TorchArchiveEntry>& entries);

struct TorchArchiveOptions {
  // Sizes and offsets from this value on are written as zip64 fields. The
  // format's limit is 0xFFFFFFFF; tests lower it to check the zip64 records
  // on small files.
  uint64_t zip64_from = 0xFFFFFFFFu;
};

// Not thread-safe. Writes through an OutputFile (output_file.h): a unique
// temporary file renamed over `path` on Finish(), so a failed export leaves
// no partial file behind, and `path` is refused unless it is absent or a
// regular file.
class TorchArchiveWriter {
 public:
  // Checks `entries` (as TorchStateDictPickle) and `path`, then writes
  // data.pkl. The dict keeps the order of `entries`.
  static Result<std::unique_ptr<TorchArchiveWriter>> Create(const std::string& path,
                                                            std::vector<TorchArchiveEntry> entries,
                                                            TorchArchiveOptions options = {});
  ~TorchArchiveWriter();  // removes the temporary file unless Finish() succeeded
  TorchArchiveWriter(const TorchArchiveWriter&) = delete;
  TorchArchiveWriter& operator=(const TorchArchiveWriter&) = delete;

  const std::vector<TorchArchiveEntry>& entries() const { return entries_; }
  // Appends the bytes of entries()[i] for the next i, all at once: exactly
  // entries()[i].bytes bytes (InvalidArgument otherwise, or when every
  // entry was appended already).
  Status Append(const void* data, size_t bytes);
  // Writes the version entry and the central directory, then syncs and
  // renames into place (OutputFile::Commit). InvalidArgument when an entry
  // was not appended.
  Status Finish();

 private:
  struct Written {
    std::string name;
    uint32_t crc = 0;
    uint64_t size = 0;
    uint64_t offset = 0;  // of the local header
  };
  TorchArchiveWriter(std::vector<TorchArchiveEntry> entries, std::unique_ptr<OutputFile> file,
                     TorchArchiveOptions options);
  Status WriteEntry(const std::string& name, const void* data, uint64_t size);

  std::vector<TorchArchiveEntry> entries_;
  std::unique_ptr<OutputFile> file_;
  TorchArchiveOptions options_;
  std::vector<Written> written_;
  uint64_t offset_ = 0;
  size_t next_ = 0;
};

}  // namespace trainsnap::cli
