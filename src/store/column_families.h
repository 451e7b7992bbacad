// The column families of a store's RocksDB database, in the order the store
// opens them (docs/format.md). Shared with tests that open a closed store's
// database directly.
#pragma once

#include <cstddef>

namespace trainsnap::internal {

enum class ColumnFamily : size_t {
  kDefault = 0,  // RocksDB's own; unused
  kMeta,         // the meta record and the counts record
  kSnapshots,    // step -> snapshot record
  kTensors,      // (step, param_id, role) -> tensor record (snapshot format 1)
  kChunks,       // chunk hash -> encoded chunk
  kChunkDeps,    // delta chunk hash -> base chunk hash
};
inline constexpr size_t kColumnFamilyCount = 6;

inline constexpr const char* ColumnFamilyName(ColumnFamily cf) {
  switch (cf) {
    case ColumnFamily::kDefault: return "default";
    case ColumnFamily::kMeta: return "meta";
    case ColumnFamily::kSnapshots: return "snapshots";
    case ColumnFamily::kTensors: return "tensors";
    case ColumnFamily::kChunks: return "chunks";
    case ColumnFamily::kChunkDeps: return "chunk_deps";
  }
  return "";
}

}  // namespace trainsnap::internal
