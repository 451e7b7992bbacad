// Definitions shared by the rocks_store_*.cc files (one concept each); not
// for other callers.
#pragma once

#include <sys/statvfs.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include "store/column_families.h"
#include "store/keys.h"
#include "trainsnap/store.h"

namespace trainsnap::proto {
class StoreMeta;
}

namespace trainsnap::internal {

namespace fs = std::filesystem;

// Meta format versions this build reads; it writes the newest, and a
// writable open upgrades an older store's meta (version 2 only adds delta
// chunks and the chunk_deps CF, which builds that read only version 1
// would misread; version 3 adds the counts record, which older builds would
// leave stale).
inline constexpr uint32_t kMetaFormatVersion = 3;
// 4: the store holds snapshot records of format version 2 (tensor records in
// record-group chunks), which builds that know 1..3 would misread and whose
// groups their GC would delete. Written by the commit of the first such
// snapshot, in its batch; a store without one stays at version 3.
inline constexpr uint32_t kGroupedMetaFormatVersion = 4;
inline constexpr uint32_t kCountsFormatVersion = 3;
inline constexpr uint32_t kOldestMetaFormatVersion = 1;
inline constexpr size_t kDefaultDeltaBaseCacheBytes = size_t{1} << 30;
inline constexpr char kMetaStoreKey[] = "store";
inline constexpr size_t kDefaultChunkBytes = size_t{1} << 20;
// Chunk sizes a store may be created with: at least the largest element
// (complex128), at most what one RocksDB value comfortably holds.
inline constexpr size_t kMinChunkBytes = 16;
inline constexpr size_t kMaxChunkBytes = size_t{1} << 30;
// Values at least this large go to blob files: chunk values are either tiny
// (tails of small tensors) or close to chunk_bytes.
inline constexpr uint64_t kMinBlobBytes = 4096;

// Chunk deletions are written in batches of this many keys.
inline constexpr size_t kGcBatch = 1024;

// Defaults of StoreOptions::max_unflushed_bytes and max_unflushed_commits.
inline constexpr uint64_t kDefaultMaxUnflushedBytes = uint64_t{16} << 20;
inline constexpr int kDefaultMaxUnflushedCommits = 16;
// The reserve file (StoreOptions::reserve_bytes). RocksDB ignores files whose
// names it does not know.
inline constexpr char kReserveFile[] = "SPACE_RESERVE";
// Giving space back relocates the live values of the blob files once the
// garbage in them exceeds this fraction of the live values: blob files then
// stay under 1 + kMaxGarbageRatio times the live bytes.
inline constexpr double kMaxGarbageRatio = 0.25;
// Per blob file, RocksDB 7.8 writes a 30-byte header and a 32-byte footer;
// per value, a 32-byte record header and the key (16 bytes here).
inline constexpr uint64_t kBlobFileOverhead = 30 + 32;
inline constexpr uint64_t kBlobRecordOverhead = 32 + 16;

// Free bytes for an unprivileged writer on the file system of `path`; nullopt
// when statvfs fails.
inline std::optional<uint64_t> FreeBytes(const std::string& path) {
  struct statvfs st;
  if (::statvfs(path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
}

inline int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline std::string StepName(int64_t step) { return "step " + std::to_string(step); }

// How errors name a TensorRead (built only when one is reported).
inline std::string ReadName(const TensorRead& read) {
  if (!read.name.empty()) return read.name;
  return "read tensor param_id " + ParamIdHex(read.record->param_id) + " role " + read.record->role;
}

// The smallest key greater than every key starting with `prefix`; empty if none.
inline std::string PrefixUpperBound(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last != 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return prefix;
}

// The column family descriptors of a store, indexed by ColumnFamily
// (rocks_store_schema.cc).
std::vector<rocksdb::ColumnFamilyDescriptor> ColumnFamilies();
// The database options every open starts from.
rocksdb::DBOptions BaseDbOptions();
// Reads of chunk values on the restore path (see the definition).
rocksdb::ReadOptions ChunkReadOptions();

// The checks of a meta record against this build and the opener's options.
Status CheckMeta(const proto::StoreMeta& meta, const StoreOptions& options);
std::string OptionalStep(const std::optional<int64_t>& step);
std::string DescribeLoss(const LostCommits& loss);

}  // namespace trainsnap::internal
