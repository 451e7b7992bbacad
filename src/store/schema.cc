#include "store/schema.h"

#include <cstdarg>
#include <memory>

#include <rocksdb/filter_policy.h>
#include <rocksdb/listener.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/table_properties_collectors.h>

#include "store/column_families.h"

namespace trainsnap::internal {

// Reads of chunk index entries on the restore path skip RocksDB's block
// CRC32C (computed in software by Debian's librocksdb): a damaged entry
// either fails to parse or points at bytes whose XXH3-128 content hash,
// checked on every chunk read, does not match. Verify keeps the check.
rocksdb::ReadOptions ChunkReadOptions() {
  rocksdb::ReadOptions options;
  options.verify_checksums = false;
  return options;
}

std::vector<rocksdb::ColumnFamilyDescriptor> ColumnFamilies() {
  // The chunks CF holds 28-byte index entries (PackEntry); the chunk bytes
  // are in pack files (PackSet), written once, outside the WAL.
  rocksdb::ColumnFamilyOptions chunks;
  chunks.compression = rocksdb::kNoCompression;
  // Most look-ups of a new chunk's hash miss: a Bloom filter answers them
  // without reading a data block.
  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  chunks.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  // And so does one in the memtable, which holds the index entries of the
  // latest commits: without it each miss descended the skip list, a cache
  // miss per level, deeper the more entries a capture commits (to scale linearly
  // with the tensor count). 2 % of the write buffer: an index entry takes about
  // 65 bytes of it (16-byte key, 28-byte value, RocksDB's framing and skip
  // list node), so about 10 filter bits per entry.
  chunks.memtable_prefix_bloom_size_ratio = 0.02;
  chunks.memtable_whole_key_filtering = true;
  // Retention deletes a dropped snapshot's index entries (keys are hashes:
  // scattered among the live ones) and leaves their tombstones to background
  // compactions (RocksStore::IndexTidy::kInBackground): an SST file whose
  // entries are a quarter deletions, or half of any 128 consecutive ones, is
  // marked for compaction when written, so that tombstones do not pile up in
  // the index that compaction scans.
  chunks.table_properties_collector_factories.push_back(rocksdb::NewCompactOnDeletionCollectorFactory(
      kIndexDeletionWindow, kIndexDeletionTrigger, kIndexDeletionRatio));
  return {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {ColumnFamilyName(ColumnFamily::kMeta), rocksdb::ColumnFamilyOptions()},
      {ColumnFamilyName(ColumnFamily::kSnapshots), rocksdb::ColumnFamilyOptions()},
      {ColumnFamilyName(ColumnFamily::kTensors), rocksdb::ColumnFamilyOptions()},
      {ColumnFamilyName(ColumnFamily::kChunks), chunks},
      {ColumnFamilyName(ColumnFamily::kChunkDeps), rocksdb::ColumnFamilyOptions()},
  };
}

namespace {

// RocksDB's info log is a file in the database directory. On a full disk
// its writer fails, and Debian's librocksdb (built with assertions) aborts the
// process on the next log line. Read-only openers would also replace the
// writer's LOG file. trainsnap reports errors through Status instead.
class DiscardLogger final : public rocksdb::Logger {
 public:
  DiscardLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::HEADER_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
};

// RocksDB's own recovery from a background error (the SstFileManager's
// thread that resumes once space is free, and the resume loop for
// retryable I/O errors such as ENOSPC) races trainsnap's: ReopenLocked closes
// the database, and Close() waits for a recovery in progress, whose flush
// on a still-full disk fails, sleeps 1 s and is rescheduled while recovery
// runs. A writer could wait there for minutes (seen on a full tmpfs). Only
// trainsnap recovers: it reopens on the next write (PrepareWrite).
class NoAutoRecovery final : public rocksdb::EventListener {
 public:
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason /*reason*/, rocksdb::Status /*bg_error*/,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }
};

}  // namespace

rocksdb::DBOptions BaseDbOptions() {
  rocksdb::DBOptions o;
  o.paranoid_checks = true;
  static const auto logger = std::make_shared<DiscardLogger>();
  o.info_log = logger;
  o.listeners.push_back(std::make_shared<NoAutoRecovery>());
  o.max_bgerror_resume_count = 0;
  // Snapshot and tensor records are small: their memtables seldom fill, and a
  // WAL file lives until every CF with data in it is flushed. Bound the WAL
  // (RocksDB's default bound is 4x all memtables, ~2.5 GiB here): past this,
  // RocksDB flushes the CFs that pin the oldest WAL file. Writable opens use
  // StoreOptions::max_unflushed_bytes.
  o.max_total_wal_size = kDefaultMaxUnflushedBytes;
  // Replay the WAL into memtables instead of flushing it to table and blob
  // files: a writable open then needs a few KiB (a MANIFEST, an OPTIONS file,
  // a new WAL), not the size of the unflushed WAL, so a store opens on a
  // nearly full disk, and a failed open leaves no partial table files behind.
  // The old WAL files stay until their data is flushed.
  o.avoid_flush_during_recovery = true;
  // No preallocation: RocksDB would fallocate each WAL file in blocks of up
  // to max_total_wal_size (and table files likewise), space that a nearly
  // full disk lacks and that statvfs counts as used.
  o.allow_fallocate = false;
  // Open table files on the opening thread: RocksDB's default starts 16
  // threads per open to load them, and in a process that has loaded
  // LibTorch each new thread spends milliseconds zero-filling its static TLS
  // (measured: most of a read-only open's time). The store has few tables.
  o.max_file_opening_threads = 1;
  return o;
}

rocksdb::OptimisticTransactionDBOptions TransactionDbOptions() {
  rocksdb::OptimisticTransactionDBOptions o;
  // Commits validate in parallel under per-key bucket locks. RocksDB's default
  // of 2^20 buckets allocates a million mutexes at every writable open (most
  // of Store::Open's time, measured); commits here are few and serialized by
  // the store's commit lock, so a few thousand buckets never contend.
  o.occ_lock_buckets = 4096;
  return o;
}

}  // namespace trainsnap::internal
