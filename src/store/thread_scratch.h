// Bounds the per-thread scratch buffers of the chunk paths (encode, decode,
// read, verify). Each call site keeps one thread_local buffer, reused across
// chunks so that a chunk costs no allocation; a ScratchTrim placed beside the
// use frees the buffer when the scope ends if it grew beyond
// kKeptScratchBytes (stores with chunks larger than the default 1 MiB), so
// that between calls no thread holds more than kKeptScratchBytes per site.
#pragma once

#include <cstddef>

namespace trainsnap::internal {

// 4 MiB: a default 1 MiB chunk's buffers (raw, filtered, encoded with Zstd's
// bound) stay allocated; larger ones are freed after each use.
inline constexpr size_t kKeptScratchBytes = size_t{4} << 20;

template <typename Buffer>
class ScratchTrim {
 public:
  explicit ScratchTrim(Buffer& buffer) : buffer_(buffer) {}
  ScratchTrim(const ScratchTrim&) = delete;
  ScratchTrim& operator=(const ScratchTrim&) = delete;
  ~ScratchTrim() {
    if (buffer_.capacity() > kKeptScratchBytes) Buffer().swap(buffer_);
  }

 private:
  Buffer& buffer_;
};

}  // namespace trainsnap::internal
