#include "store/pack_set.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <gtest/gtest.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include "store/chunk_codec.h"
#include "testing/temp_dir.h"
#include "testing/fault_injection_fs.h"

namespace trainsnap::internal {
namespace {

namespace fs = std::filesystem;
using trainsnap::testing::FaultInjectionFS;
using trainsnap::testing::FsOp;
using trainsnap::testing::TempDir;

std::string Raw(size_t n, char fill) {
  std::string raw(n, fill);
  std::string encoded;
  ChunkEncodeOptions o;
  o.compress = false;
  EXPECT_TRUE(EncodeChunk(raw.data(), raw.size(), o, &encoded).ok());
  return encoded;
}

TEST(PackSetTest, FileNamesRoundTrip) {
  EXPECT_EQ(PackFileName(42), "pack-0000002a.pack");
  EXPECT_EQ(ParsePackFileName("pack-0000002a.pack"), std::optional<uint32_t>(42));
  EXPECT_EQ(ParsePackFileName("pack-0000002A.pack"), std::nullopt);
  EXPECT_EQ(ParsePackFileName("pack-00000000.pack"), std::nullopt);
  EXPECT_EQ(ParsePackFileName("pack-0000002a.pack.tmp"), std::nullopt);
  EXPECT_EQ(ParsePackFileName("000012.blob"), std::nullopt);
}

TEST(PackSetTest, AppendsSyncsAndReadsBackRawAndEncoded) {
  TempDir dir;
  auto set = PackSet::Open(rocksdb::FileSystem::Default().get(), dir.path(), /*writable=*/true, 1 << 20);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  const std::string a = Raw(100, 'a'), b = Raw(50, 'b');
  auto ea = (*set)->Append(a, 100, true);
  auto eb = (*set)->Append(b, 50, true);
  ASSERT_TRUE(ea.ok() && eb.ok());
  EXPECT_EQ(ea->pack, 1u);
  EXPECT_EQ(ea->offset, kPackHeaderBytes);
  EXPECT_EQ(eb->offset, kPackHeaderBytes + a.size());
  EXPECT_FALSE((*set)->IsDurable(*ea));
  ASSERT_TRUE((*set)->Sync().ok());
  EXPECT_TRUE((*set)->IsDurable(*ea));
  EXPECT_TRUE((*set)->IsDurable(*eb));
  std::string back;
  ASSERT_TRUE((*set)->ReadEncoded(*eb, &back).ok());
  EXPECT_EQ(back, b);
  std::string raw(100, '\0');
  ASSERT_TRUE((*set)->ReadRawInto(*ea, reinterpret_cast<uint8_t*>(raw.data())).ok());
  EXPECT_EQ(raw, std::string(100, 'a'));
  EXPECT_EQ(fs::file_size(dir.Sub("packs/pack-00000001.pack")), kPackHeaderBytes + a.size() + b.size());
  // A new set continues above the packs present.
  set->reset();
  auto again = PackSet::Open(rocksdb::FileSystem::Default().get(), dir.path(), true, 1 << 20);
  ASSERT_TRUE(again.ok());
  auto ec = (*again)->Append(a, 100, true);
  ASSERT_TRUE(ec.ok());
  EXPECT_EQ(ec->pack, 2u);
}

TEST(PackSetTest, RotatesAtTheTargetSize) {
  TempDir dir;
  auto set = PackSet::Open(rocksdb::FileSystem::Default().get(), dir.path(), true, 200);
  ASSERT_TRUE(set.ok());
  const std::string c = Raw(100, 'c');
  std::vector<PackEntry> entries;
  for (int i = 0; i < 4; ++i) {
    auto e = (*set)->Append(c, 100, true);
    ASSERT_TRUE(e.ok());
    entries.push_back(*e);
  }
  // 8 + 116 < 200, 8 + 232 >= 200: two chunks per pack.
  EXPECT_EQ(entries[0].pack, 1u);
  EXPECT_EQ(entries[1].pack, 1u);
  EXPECT_EQ(entries[2].pack, 2u);
  EXPECT_EQ(entries[3].pack, 2u);
  ASSERT_TRUE((*set)->Sync().ok());
  for (const PackEntry& e : entries) EXPECT_TRUE((*set)->IsDurable(e));
  auto files = (*set)->List();
  ASSERT_TRUE(files.ok());
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ((*files)[0].size, 8u + 2 * c.size());
}

TEST(PackSetTest, ShortOrMissingPacksReadAsCorruption) {
  TempDir dir;
  auto set = PackSet::Open(rocksdb::FileSystem::Default().get(), dir.path(), true, 1 << 20);
  ASSERT_TRUE(set.ok());
  auto e = (*set)->Append(Raw(100, 'd'), 100, true);
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE((*set)->Sync().ok());
  set->reset();
  fs::resize_file(dir.Sub("packs/pack-00000001.pack"), 60);
  auto reader = PackSet::Open(rocksdb::FileSystem::Default().get(), dir.path(), false, 1 << 20);
  ASSERT_TRUE(reader.ok());
  std::string out;
  Status s = (*reader)->ReadEncoded(*e, &out);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("116 bytes at offset 8 read as 52"), std::string::npos) << s.ToString();
  reader->reset();
  fs::remove(dir.Sub("packs/pack-00000001.pack"));
  auto gone = PackSet::Open(rocksdb::FileSystem::Default().get(), dir.path(), false, 1 << 20);
  ASSERT_TRUE(gone.ok());
  s = (*gone)->ReadEncoded(*e, &out);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("pack file pack-00000001.pack is missing"), std::string::npos) << s.ToString();
}

TEST(PackSetTest, FailedSyncLeavesOnlyTheSyncedPrefixDurableAndMovesOn) {
  TempDir dir;
  auto fault = std::make_shared<FaultInjectionFS>();
  auto set = PackSet::Open(fault.get(), dir.path(), true, 1 << 20);
  ASSERT_TRUE(set.ok());
  auto first = (*set)->Append(Raw(10, 'e'), 10, true);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE((*set)->Sync().ok());
  auto second = (*set)->Append(Raw(10, 'f'), 10, true);
  ASSERT_TRUE(second.ok());
  fault->FailNth(FsOp::kSync, 1, /*persistent=*/false, /*no_space=*/false);
  Status s = (*set)->Sync();
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  EXPECT_TRUE((*set)->IsDurable(*first));
  EXPECT_FALSE((*set)->IsDurable(*second));
  // The failed pack takes no more appends.
  auto third = (*set)->Append(Raw(10, 'g'), 10, true);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->pack, first->pack + 1);
  ASSERT_TRUE((*set)->Sync().ok());
  EXPECT_TRUE((*set)->IsDurable(*third));
  EXPECT_FALSE((*set)->IsDurable(*second));
}

TEST(PackSetTest, FailedAppendRetiresThePackWithNoSpace) {
  TempDir dir;
  auto fault = std::make_shared<FaultInjectionFS>();
  auto set = PackSet::Open(fault.get(), dir.path(), true, 1 << 20);
  ASSERT_TRUE(set.ok());
  auto first = (*set)->Append(Raw(10, 'h'), 10, true);
  ASSERT_TRUE(first.ok());
  fault->FailNth(FsOp::kAppend, 1, false, /*no_space=*/true);
  auto failed = (*set)->Append(Raw(10, 'i'), 10, true);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kNoSpace) << failed.status().ToString();
  // Retired before its first sync: nothing in it is durable.
  EXPECT_FALSE((*set)->IsDurable(*first));
  auto next = (*set)->Append(Raw(10, 'j'), 10, true);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->pack, first->pack + 1);
}

TEST(PackSetTest, PowerLossKeepsExactlyTheSyncedBytes) {
  TempDir dir;
  auto fault = std::make_shared<FaultInjectionFS>();
  PackEntry synced, unsynced;
  {
    auto set = PackSet::Open(fault.get(), dir.path(), true, 1 << 20);
    ASSERT_TRUE(set.ok());
    auto a = (*set)->Append(Raw(30, 'k'), 30, true);
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE((*set)->Sync().ok());
    auto b = (*set)->Append(Raw(30, 'l'), 30, true);
    ASSERT_TRUE(b.ok());
    synced = *a;
    unsynced = *b;
  }
  ASSERT_TRUE(fault->DropUnsyncedData().ok());
  EXPECT_EQ(fs::file_size(dir.Sub("packs/pack-00000001.pack")), synced.end());
  auto reader = PackSet::Open(fault.get(), dir.path(), false, 1 << 20);
  ASSERT_TRUE(reader.ok());
  std::string out;
  ASSERT_TRUE((*reader)->ReadEncoded(synced, &out).ok());
  EXPECT_EQ((*reader)->ReadEncoded(unsynced, &out).code(), StatusCode::kCorruption);
}

// A file system whose file Syncs wait until `release` is set; `entered`
// says that the first one began.
class HeldSyncFS : public rocksdb::FileSystemWrapper {
 public:
  explicit HeldSyncFS(std::shared_future<void> release)
      : FileSystemWrapper(rocksdb::FileSystem::Default()), release_(std::move(release)) {}
  const char* Name() const override { return "HeldSyncFS"; }
  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r, rocksdb::IODebugContext* d) override {
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s = target()->NewWritableFile(f, o, &file, d);
    if (s.ok()) r->reset(new File(std::move(file), this));
    return s;
  }
  std::future<void> entered() { return entered_.get_future(); }

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> f, HeldSyncFS* fs) : FSWritableFileOwnerWrapper(std::move(f)), fs_(fs) {}
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
      if (!fs_->entered_once_.exchange(true)) fs_->entered_.set_value();
      fs_->release_.wait();
      return target()->Sync(o, d);
    }

   private:
    HeldSyncFS* fs_;
  };
  std::shared_future<void> release_;
  std::promise<void> entered_;
  std::atomic<bool> entered_once_{false};
};

// A capture's commit syncing the packs does not hold up another capture's
// appends: they go on during the fsync (to the same pack) and become
// durable with the next Sync.
TEST(PackSetTest, AppendsGoOnWhileASyncWaitsForTheDisk) {
  TempDir dir;
  std::promise<void> release;
  HeldSyncFS held(release.get_future().share());
  auto set = PackSet::Open(&held, dir.path(), /*writable=*/true, 1 << 20);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  const std::string a = Raw(100, 'a'), b = Raw(50, 'b');
  auto ea = (*set)->Append(a, 100, true);
  ASSERT_TRUE(ea.ok());
  std::future<void> entered = held.entered();
  std::future<Status> sync = std::async(std::launch::async, [&] { return (*set)->Sync(); });
  entered.wait();  // the fsync of pack 1 has begun and waits
  auto append = std::async(std::launch::async, [&] { return (*set)->Append(b, 50, true); });
  if (append.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    release.set_value();
    FAIL() << "the append waited for the Sync's fsync";
  }
  Result<PackEntry> eb = append.get();
  ASSERT_TRUE(eb.ok()) << eb.status().ToString();
  EXPECT_EQ(eb->pack, 1u);
  EXPECT_EQ(eb->offset, kPackHeaderBytes + a.size());
  EXPECT_EQ(sync.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  release.set_value();
  ASSERT_TRUE(sync.get().ok());
  EXPECT_TRUE((*set)->IsDurable(*ea));
  EXPECT_FALSE((*set)->IsDurable(*eb));  // appended after that Sync began
  ASSERT_TRUE((*set)->Sync().ok());
  EXPECT_TRUE((*set)->IsDurable(*eb));
  std::string back;
  ASSERT_TRUE((*set)->ReadEncoded(*eb, &back).ok());
  EXPECT_EQ(back, b);
}

TEST(PackSetTest, TruncateAndRemove) {
  TempDir dir;
  auto set = PackSet::Open(rocksdb::FileSystem::Default().get(), dir.path(), true, 100);
  ASSERT_TRUE(set.ok());
  auto a = (*set)->Append(Raw(100, 'm'), 100, true);  // fills pack 1
  auto b = (*set)->Append(Raw(100, 'n'), 100, true);  // pack 2
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*set)->Sync().ok());
  EXPECT_EQ((*set)->Truncate(b->pack, 8).code(), StatusCode::kInvalidArgument);  // still the active pack
  ASSERT_TRUE((*set)->Truncate(a->pack, 8).ok());
  EXPECT_EQ(fs::file_size(dir.Sub("packs/pack-00000001.pack")), 8u);
  ASSERT_TRUE((*set)->Remove(a->pack).ok());
  EXPECT_FALSE(fs::exists(dir.Sub("packs/pack-00000001.pack")));
  ASSERT_TRUE((*set)->Remove(a->pack).ok());  // already gone: nothing to do
}

}  // namespace
}  // namespace trainsnap::internal
