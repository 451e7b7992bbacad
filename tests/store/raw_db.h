// Opens a store's RocksDB directly (the store must be closed), so that tests
// can damage or rewrite what the store wrote.
#pragma once

#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include "store/column_families.h"
#include "store/keys.h"
#include "store/pack_entry.h"
#include "store/pack_set.h"

namespace trainsnap::testing {

class RawDb {
 public:
  explicit RawDb(const std::string& path) : path_(path) {
    rocksdb::ColumnFamilyOptions chunks;
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

  // The encoded chunk `hash` as stored: its index entry read from the
  // chunks CF, its bytes from its pack file.
  rocksdb::Status GetChunk(const ChunkHash& hash, std::string* value) {
    auto entry = Entry(hash);
    if (!entry) return rocksdb::Status::NotFound("chunk index entry");
    std::ifstream in(PackPath(*entry), std::ios::binary);
    value->assign(entry->length, '\0');
    in.seekg(static_cast<std::streamoff>(entry->offset));
    in.read(value->data(), entry->length);
    if (!in) return rocksdb::Status::Corruption("short pack file");
    return rocksdb::Status::OK();
  }
  // XORs byte `offset` of the encoded chunk `hash` in its pack file with 0x01.
  void FlipChunkByte(const ChunkHash& hash, size_t offset) {
    auto entry = Entry(hash);
    ASSERT_TRUE(entry.has_value());
    ASSERT_LT(offset, entry->length);
    std::fstream f(PackPath(*entry), std::ios::binary | std::ios::in | std::ios::out);
    const auto at = static_cast<std::streamoff>(entry->offset + offset);
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x01);
    f.seekp(at);
    f.write(&c, 1);
    ASSERT_TRUE(f.good());
  }
  std::optional<internal::PackEntry> Entry(const ChunkHash& hash) {
    std::string value;
    if (!db_->Get(rocksdb::ReadOptions(), chunks(), internal::EncodeChunkKey(hash), &value).ok()) return std::nullopt;
    auto entry = internal::ParsePackEntry(value);
    if (!entry.ok()) return std::nullopt;
    return *entry;
  }
  std::string PackPath(const internal::PackEntry& entry) const {
    return path_ + "/" + internal::kPackDir + "/" + internal::PackFileName(entry.pack);
  }

  // XORs byte `offset` of the value stored under `key` in `cf` with 0x01.
  void FlipByte(rocksdb::ColumnFamilyHandle* cf, const std::string& key, size_t offset) {
    std::string value;
    ASSERT_TRUE(db_->Get(rocksdb::ReadOptions(), cf, key, &value).ok());
    ASSERT_LT(offset, value.size());
    value[offset] = static_cast<char>(value[offset] ^ 0x01);
    ASSERT_TRUE(db_->Put(rocksdb::WriteOptions(), cf, key, value).ok());
  }

 private:
  std::string path_;
  rocksdb::Status status_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
};

}  // namespace trainsnap::testing
