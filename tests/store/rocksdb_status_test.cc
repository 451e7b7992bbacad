#include "store/rocksdb_status.h"

#include <gtest/gtest.h>

namespace trainsnap::internal {
namespace {

TEST(RocksdbStatusTest, MapsEveryKind) {
  EXPECT_TRUE(FromRocks(rocksdb::Status::OK(), "x").ok());
  EXPECT_EQ(FromRocks(rocksdb::Status::NoSpace("disk full"), "x").code(), StatusCode::kNoSpace);
  EXPECT_EQ(FromRocks(rocksdb::Status::IOError(rocksdb::Status::SubCode::kNoSpace), "x").code(),
            StatusCode::kNoSpace);
  EXPECT_EQ(FromRocks(rocksdb::Status::Corruption("block checksum mismatch"), "x").code(), StatusCode::kCorruption);
  EXPECT_EQ(FromRocks(rocksdb::Status::IOError("read failed"), "x").code(), StatusCode::kIOError);
  EXPECT_EQ(FromRocks(rocksdb::Status::NotFound("k"), "x").code(), StatusCode::kNotFound);
  EXPECT_EQ(FromRocks(rocksdb::Status::InvalidArgument("a"), "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FromRocks(rocksdb::Status::NotSupported("a"), "x").code(), StatusCode::kNotSupported);
  EXPECT_EQ(FromRocks(rocksdb::Status::Busy("a"), "x").code(), StatusCode::kBusy);
  EXPECT_EQ(FromRocks(rocksdb::Status::Aborted("a"), "x").code(), StatusCode::kAborted);
  EXPECT_EQ(FromRocks(rocksdb::Status::Incomplete("a"), "x").code(), StatusCode::kAborted);
}

TEST(RocksdbStatusTest, LockErrorIsBusyNamingThePath) {
  Status s = FromRocks(rocksdb::Status::IOError("While lock file: /data/run/LOCK: Resource temporarily unavailable"),
                       "open store /data/run", "/data/run");
  EXPECT_EQ(s.code(), StatusCode::kBusy);
  EXPECT_EQ(s.message(),
            "open store /data/run: store /data/run is held by another writer (IO error: While lock file: "
            "/data/run/LOCK: Resource temporarily unavailable)");
  Status c = FromRocks(rocksdb::Status::Corruption("bad block"), "read chunk 9f");
  EXPECT_EQ(c.message(), "read chunk 9f: Corruption: bad block");
}

}  // namespace
}  // namespace trainsnap::internal
