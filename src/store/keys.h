// Key encodings of the column families (docs/format.md, "Keys"). All integers
// are big-endian so that RocksDB's bytewise order is numeric order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

inline constexpr size_t kStepKeyBytes = 8;
inline constexpr size_t kChunkKeyBytes = 16;

// snapshots/<step>: 8 bytes big-endian with the sign bit flipped, so that
// negative steps sort before positive ones.
std::string EncodeStepKey(int64_t step);
Result<int64_t> DecodeStepKey(std::string_view key);

// tensors/<step ‖ param_id ‖ role>.
std::string EncodeTensorKey(int64_t step, uint64_t param_id, std::string_view role);
// The 8-byte prefix shared by every tensor key of `step`.
std::string TensorKeyPrefix(int64_t step);
struct TensorKey {
  int64_t step = 0;
  uint64_t param_id = 0;
  std::string role;
};
Result<TensorKey> DecodeTensorKey(std::string_view key);

// chunks/<hash>: the 16 hash bytes as stored in ChunkHash.
std::string EncodeChunkKey(const ChunkHash& hash);
Result<ChunkHash> DecodeChunkKey(std::string_view key);

// How messages name a parameter ID: "0x" and 16 hex digits, as the CLI
// prints it everywhere (docs/cli.md).
std::string ParamIdHex(uint64_t param_id);

// The smallest key greater than every key starting with `prefix`; empty if none.
std::string PrefixUpperBound(std::string prefix);

}  // namespace trainsnap::internal
