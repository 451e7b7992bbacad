#include "testing/fault_injection_fs.h"

#include "testing/temp_dir.h"

#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <rocksdb/db.h>

namespace trainsnap::testing {
namespace {

class FaultInjectionFSTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_.Sub("db");
    fs_ = std::make_shared<FaultInjectionFS>();
    env_ = NewFaultInjectionEnv(fs_);
  }
  void TearDown() override { db_.reset(); }
  void OpenDb() {
    rocksdb::Options options;
    options.create_if_missing = true;
    options.env = env_.get();
    rocksdb::DB* db = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(options, dir_.string(), &db);
    ASSERT_TRUE(s.ok()) << s.ToString();
    db_.reset(db);
  }
  rocksdb::Status Put(const std::string& k, const std::string& v, bool sync) {
    rocksdb::WriteOptions wo;
    wo.sync = sync;
    return db_->Put(wo, k, v);
  }
  std::string Get(const std::string& k) {
    std::string v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), k, &v);
    return s.ok() ? v : "<" + s.ToString() + ">";
  }

  TempDir temp_;  // holds dir_ and the copies beside it
  std::filesystem::path dir_;
  std::shared_ptr<FaultInjectionFS> fs_;
  std::unique_ptr<rocksdb::Env> env_;
  std::unique_ptr<rocksdb::DB> db_;
};

TEST_F(FaultInjectionFSTest, OneShotAppendFailureIsNoSpace) {
  OpenDb();
  ASSERT_TRUE(Put("a", "1", true).ok());
  fs_->FailNth(FsOp::kAppend, 1, /*persistent=*/false, /*no_space=*/true);
  rocksdb::Status s = Put("b", "2", true);
  EXPECT_TRUE(s.IsNoSpace() || s.subcode() == rocksdb::Status::kNoSpace) << s.ToString();
  EXPECT_EQ(fs_->faults_injected(), 1u);
  EXPECT_EQ(Get("a"), "1");
}

TEST_F(FaultInjectionFSTest, PersistentSyncFailureKeepsFailing) {
  OpenDb();
  fs_->FailNth(FsOp::kSync, 2, /*persistent=*/true, /*no_space=*/false);
  EXPECT_TRUE(Put("a", "1", true).ok());
  rocksdb::Status s1 = Put("b", "2", true);
  EXPECT_TRUE(s1.IsIOError()) << s1.ToString();
  EXPECT_EQ(fs_->faults_injected(), 1u);
  // A failed WAL sync stops the DB for good (RocksDB 7.8 will not Resume()
  // from it); reopening syncs again and fails again while the fault persists...
  db_.reset();
  rocksdb::Options options;
  options.env = env_.get();
  rocksdb::DB* db = nullptr;
  EXPECT_FALSE(rocksdb::DB::Open(options, dir_.string(), &db).ok());
  delete db;
  EXPECT_GE(fs_->faults_injected(), 2u);
  // ...and works once it is cleared, with the synced write intact.
  fs_->ClearFaults();
  OpenDb();
  EXPECT_EQ(Get("a"), "1");
  EXPECT_TRUE(Put("d", "4", true).ok());
}

TEST_F(FaultInjectionFSTest, FlipBitOnReadCorruptsTheReadNotTheFile) {
  OpenDb();
  ASSERT_TRUE(Put("k", std::string(8192, 'v'), true).ok());
  ASSERT_TRUE(db_->Flush(rocksdb::FlushOptions()).ok());
  db_.reset();
  OpenDb();  // reads now come from the table file
  fs_->FlipBitOnRead(".sst", 1, /*persistent=*/true);
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  std::string v;
  rocksdb::Status s = db_->Get(ro, "k", &v);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_GE(fs_->reads_corrupted(), 1u);
  fs_->ClearFaults();
  db_.reset();
  OpenDb();  // the file itself is intact
  EXPECT_EQ(Get("k"), std::string(8192, 'v'));
}

TEST_F(FaultInjectionFSTest, CopySyncedStateIsAPowerLossImageOfAnOpenDb) {
  OpenDb();
  ASSERT_TRUE(Put("durable", "yes", true).ok());
  ASSERT_TRUE(Put("volatile", "maybe", false).ok());
  const std::string image = dir_.string() + "_image";
  std::filesystem::remove_all(image);
  ASSERT_TRUE(fs_->CopySyncedState(dir_.string(), image).ok());
  EXPECT_EQ(Get("volatile"), "maybe");  // the open DB is untouched
  db_.reset();
  rocksdb::Options options;
  rocksdb::DB* db = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, image, &db).ok());
  std::string v;
  EXPECT_TRUE(db->Get(rocksdb::ReadOptions(), "durable", &v).ok());
  EXPECT_EQ(v, "yes");
  EXPECT_TRUE(db->Get(rocksdb::ReadOptions(), "volatile", &v).IsNotFound());
  delete db;
  std::filesystem::remove_all(image);
}

TEST_F(FaultInjectionFSTest, ByteBudgetGivesNoSpace) {
  OpenDb();
  fs_->SetByteBudget(64 * 1024);
  rocksdb::Status s;
  int written = 0;
  for (; written < 1000; ++written) {
    s = Put("k" + std::to_string(written), std::string(1024, 'x'), true);
    if (!s.ok()) break;
  }
  EXPECT_GT(written, 10);
  EXPECT_LT(written, 1000);
  EXPECT_TRUE(s.IsNoSpace() || s.subcode() == rocksdb::Status::kNoSpace) << s.ToString();
}

TEST_F(FaultInjectionFSTest, PowerLossKeepsSyncedWritesAndDropsUnsynced) {
  OpenDb();
  ASSERT_TRUE(Put("durable", "yes", true).ok());
  ASSERT_TRUE(Put("volatile", "maybe", false).ok());
  db_.reset();  // closing flushes nothing to disk by itself: the WAL tail stays unsynced
  ASSERT_TRUE(fs_->DropUnsyncedData().ok());
  OpenDb();
  EXPECT_EQ(Get("durable"), "yes");
}

}  // namespace
}  // namespace trainsnap::testing
