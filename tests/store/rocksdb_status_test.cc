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

// Busy is a lock held, recognized by the store's own LOCK path and RocksDB's
// wording of a refused lock; permission denied on the LOCK file (or any
// other file with LOCK in its name) is an IOError naming the path.
TEST(RocksdbStatusTest, PermissionDeniedOnTheLockFileIsIOErrorNotBusy) {
  Status denied = FromRocks(rocksdb::Status::IOError("While open a file for lock: /data/run/LOCK: Permission denied"),
                            "open store /data/run", "/data/run");
  EXPECT_EQ(denied.code(), StatusCode::kIOError);
  EXPECT_EQ(denied.message(),
            "open store /data/run: IO error: While open a file for lock: /data/run/LOCK: Permission denied");
  Status other_lock = FromRocks(rocksdb::Status::IOError("While lock file: /elsewhere/LOCK: Resource temporarily "
                                                         "unavailable"),
                                "open store /data/run", "/data/run");
  EXPECT_EQ(other_lock.code(), StatusCode::kIOError);
  Status named_lock = FromRocks(rocksdb::Status::IOError("While open a file for random read: /data/run/BLOCKS.sst: "
                                                         "Input/output error"),
                                "read", "/data/run");
  EXPECT_EQ(named_lock.code(), StatusCode::kIOError);
  Status same_process = FromRocks(rocksdb::Status::IOError("lock hold by current process, acquire time 1 acquiring "
                                                           "thread 2: /data/run/LOCK: No locks available"),
                                  "open store /data/run", "/data/run/");
  EXPECT_EQ(same_process.code(), StatusCode::kBusy);
}

TEST(RocksdbStatusTest, AMissingFileOfTheStoreIsCorruption) {
  Status s = FromRocks(rocksdb::Status::PathNotFound("While open a file for random read: /s/000012.blob: No such "
                                                     "file or directory"),
                       "read chunk 9f");
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(),
            "read chunk 9f: IO error: No such file or directory: While open a file for random read: /s/000012.blob: "
            "No such file or directory (a file of the store is missing)");
}

}  // namespace
}  // namespace trainsnap::internal
