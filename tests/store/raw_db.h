// Opens a store's RocksDB directly (the store must be closed), so that tests
// can damage or rewrite what the store wrote.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include "store/column_families.h"

namespace trainsnap::testing {

class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    rocksdb::ColumnFamilyOptions chunks;
    chunks.enable_blob_files = true;
    chunks.min_blob_size = 4096;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
    for (size_t i = 0; i < internal::kColumnFamilyCount; ++i) {
      const auto cf = static_cast<internal::ColumnFamily>(i);
      cfs.push_back({internal::ColumnFamilyName(cf), cf == internal::ColumnFamily::kChunks
                                                         ? chunks
                                                         : rocksdb::ColumnFamilyOptions()});
    }
    rocksdb::DB* db = nullptr;
    status_ = rocksdb::DB::Open(rocksdb::DBOptions(), path, cfs, &handles_, &db);
    db_.reset(db);
  }
  ~RawDb() {
    for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  }
  bool ok() const { return status_.ok(); }
  std::string error() const { return status_.ToString(); }
  rocksdb::DB* db() { return db_.get(); }
  rocksdb::ColumnFamilyHandle* handle(internal::ColumnFamily cf) { return handles_[static_cast<size_t>(cf)]; }
  rocksdb::ColumnFamilyHandle* meta() { return handle(internal::ColumnFamily::kMeta); }
  rocksdb::ColumnFamilyHandle* snapshots() { return handle(internal::ColumnFamily::kSnapshots); }
  rocksdb::ColumnFamilyHandle* tensors() { return handle(internal::ColumnFamily::kTensors); }
  rocksdb::ColumnFamilyHandle* chunks() { return handle(internal::ColumnFamily::kChunks); }
  rocksdb::ColumnFamilyHandle* chunk_deps() { return handle(internal::ColumnFamily::kChunkDeps); }

  // XORs byte `offset` of the value stored under `key` in `cf` with 0x01.
  void FlipByte(rocksdb::ColumnFamilyHandle* cf, const std::string& key, size_t offset) {
    std::string value;
    ASSERT_TRUE(db_->Get(rocksdb::ReadOptions(), cf, key, &value).ok());
    ASSERT_LT(offset, value.size());
    value[offset] = static_cast<char>(value[offset] ^ 0x01);
    ASSERT_TRUE(db_->Put(rocksdb::WriteOptions(), cf, key, value).ok());
  }

 private:
  rocksdb::Status status_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
};

}  // namespace trainsnap::testing
