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
#include <rocksdb/utilities/optimistic_transaction_db.h>

#include "store/column_families.h"
#include "store/keys.h"
#include "store/store_files.h"
#include "trainsnap/store.h"

namespace trainsnap::proto {
class StoreMeta;
}

namespace trainsnap::internal {

namespace fs = std::filesystem;

// The store format version this build reads and writes (docs/format.md).
// 5: chunk bytes live in pack files and the chunks CF holds their index
// entries (PackEntry); versions 1..4 kept chunk values in RocksDB.
// 6: snapshot records may reference a shared manifest chunk
// (SnapshotWriter::SetSharedManifest), which the GC of version 5 builds
// would delete. No store of an older version is read (trainsnap had no users
// when they changed): an open refuses it with NotSupported naming both
// versions.
inline constexpr uint32_t kMetaFormatVersion = 6;
// Version 3 added the counts record; every store this build reads has it.
inline constexpr uint32_t kCountsFormatVersion = 3;
inline constexpr size_t kDefaultDeltaBaseCacheBytes = size_t{1} << 30;
inline constexpr char kMetaStoreKey[] = "store";
inline constexpr size_t kDefaultChunkBytes = size_t{1} << 20;
// Chunk sizes a store may be created with: at least the largest element
// (complex128), at most what one RocksDB value comfortably holds.
inline constexpr size_t kMinChunkBytes = 16;
inline constexpr size_t kMaxChunkBytes = size_t{1} << 30;
// Pack files are closed for appends (a new one is started) at this size.
inline constexpr uint64_t kPackTargetBytes = uint64_t{64} << 20;
// Compaction rewrites the live chunks of a pack whose live bytes fell below
// this fraction of its chunk bytes: pack files then stay under about
// 1 / kCompactBelow times the live bytes (plus the packs still written).
inline constexpr double kCompactBelow = 0.75;

// Chunk deletions are written in batches of this many keys.
inline constexpr size_t kGcBatch = 1024;

// Defaults of StoreOptions::max_unflushed_bytes and max_unflushed_commits.
inline constexpr uint64_t kDefaultMaxUnflushedBytes = uint64_t{16} << 20;
inline constexpr int kDefaultMaxUnflushedCommits = 16;
// A commit with retention on gives space back (compacts packs) once the
// chunk bytes it deleted since the last time exceed this fraction of the
// live chunk bytes.
inline constexpr double kMaxGarbageRatio = 0.25;

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
// The transaction options of a writable open.
rocksdb::OptimisticTransactionDBOptions TransactionDbOptions();
// Reads of chunk values on the restore path (see the definition).
rocksdb::ReadOptions ChunkReadOptions();

// The checks of a meta record against this build and the opener's options.
Status CheckMeta(const proto::StoreMeta& meta, const StoreOptions& options);
std::string OptionalStep(const std::optional<int64_t>& step);
std::string DescribeLoss(const LostCommits& loss);
// The encoded length an index entry (a chunks CF value) records; 0 when it
// does not parse (callers that need more use ParsePackEntry).
uint64_t StoredBytes(std::string_view index_value);

}  // namespace trainsnap::internal
