// The RocksDB schema of a store: its column families and their tuning, and
// the database options every open starts from (docs/format.md, "Column
// families").
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <rocksdb/options.h>
#include <rocksdb/utilities/optimistic_transaction_db.h>

namespace trainsnap::internal {

// Defaults of StoreOptions::max_unflushed_bytes and max_unflushed_commits.
inline constexpr uint64_t kDefaultMaxUnflushedBytes = uint64_t{16} << 20;
inline constexpr int kDefaultMaxUnflushedCommits = 16;
// When a chunk index SST file is marked for compaction on its deletions
// (RocksDB's CompactOnDeletionCollector): kIndexDeletionTrigger deletions in
// any kIndexDeletionWindow consecutive entries, or deletions a
// kIndexDeletionRatio of all its entries.
inline constexpr size_t kIndexDeletionWindow = 128;
inline constexpr size_t kIndexDeletionTrigger = 64;
inline constexpr double kIndexDeletionRatio = 0.25;

// The column family descriptors of a store, indexed by ColumnFamily.
std::vector<rocksdb::ColumnFamilyDescriptor> ColumnFamilies();
// The database options every open starts from.
rocksdb::DBOptions BaseDbOptions();
// The transaction options of a writable open.
rocksdb::OptimisticTransactionDBOptions TransactionDbOptions();
// Reads of chunk index entries on the restore path (see the definition).
rocksdb::ReadOptions ChunkReadOptions();

}  // namespace trainsnap::internal
