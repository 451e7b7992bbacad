#include "store/rocks_store.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <set>
#include <vector>

#include "raw_db.h"
#include "store.pb.h"
#include "store/keys.h"
#include "common/thread_priority.h"
#include "store_test_util.h"
#include "testing/store_test.h"
#include "testing/temp_dir.h"
#include "testing/fault_injection_fs.h"
#include "trainsnap/store.h"

namespace trainsnap {
namespace {

using namespace trainsnap::testing;

using RocksStoreTest = StoreTest;

TEST_F(RocksStoreTest, WriteThenReadBitExact) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  EXPECT_FALSE(store_->read_only());
  EXPECT_EQ(store_->chunk_bytes(), 4096u);
  auto a = NormalFloats(5000, 1);  // 20000 bytes: 4 full chunks + a 3616-byte tail
  auto b = NormalFloats(3, 2);
  auto info = WriteSnapshot(*store_, 10, {{1, &a}, {2, &b}}, "manifest-10");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->step, 10);
  EXPECT_EQ(info->tensors, 2u);
  EXPECT_EQ(info->logical_bytes, 20012u);
  EXPECT_EQ(info->chunks, 6u);
  EXPECT_EQ(info->new_chunks, 6u);
  EXPECT_EQ(info->new_bytes, info->stored_bytes);
  EXPECT_EQ(info->manifest_bytes, 11u);

  EXPECT_EQ(ReadFloats(*store_, 10, 1), a);
  EXPECT_EQ(ReadFloats(*store_, 10, 2), b);
  auto manifest = store_->Manifest(10);
  ASSERT_TRUE(manifest.ok());
  EXPECT_EQ(*manifest, "manifest-10");

  auto tensors = store_->Tensors(10);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  ASSERT_EQ(tensors->size(), 2u);
  EXPECT_EQ((*tensors)[0].param_id, 1u);
  EXPECT_EQ((*tensors)[0].role, "param");
  EXPECT_EQ((*tensors)[0].dtype, DType::kFloat32);
  EXPECT_EQ((*tensors)[0].shape, std::vector<int64_t>{5000});
  EXPECT_EQ((*tensors)[0].chunks.size(), 5u);
  EXPECT_EQ((*tensors)[0].chunks[4].raw_bytes, 20000u - 4 * 4096u);
  EXPECT_EQ((*tensors)[1].param_id, 2u);

  auto stored = store_->Info(10);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->stored_bytes, info->stored_bytes);
  EXPECT_EQ(stored->created_unix_ms, info->created_unix_ms);
}

TEST_F(RocksStoreTest, ListLatestAndNegativeSteps) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  auto latest = store_->Latest();
  ASSERT_TRUE(latest.ok());
  EXPECT_FALSE(latest->has_value());
  auto a = NormalFloats(10, 3);
  for (int64_t step : {5, -3, 100, 0, 7}) ASSERT_TRUE(WriteSnapshot(*store_, step, {{1, &a}}).ok());
  auto list = store_->List();
  ASSERT_TRUE(list.ok());
  std::vector<int64_t> steps;
  for (const auto& i : *list) steps.push_back(i.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{-3, 0, 5, 7, 100}));
  latest = store_->Latest();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->value(), 100);
}

TEST_F(RocksStoreTest, DedupWritesNothingTheSecondTime) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  auto a = NormalFloats(5000, 4);
  auto first = WriteSnapshot(*store_, 1, {{1, &a}});
  ASSERT_TRUE(first.ok());
  auto second = WriteSnapshot(*store_, 2, {{1, &a}});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->new_chunks, 0u);
  EXPECT_EQ(second->new_bytes, 0u);
  EXPECT_EQ(second->chunks, 5u);
  EXPECT_EQ(second->stored_bytes, first->stored_bytes);
  auto stats = store_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->chunks, 5u);
  EXPECT_EQ(stats->chunk_stored_bytes, first->new_bytes);

  // One changed element rewrites exactly one chunk.
  auto b = a;
  b[4500] += 1.f;
  auto third = WriteSnapshot(*store_, 3, {{1, &b}});
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->new_chunks, 1u);
  EXPECT_EQ(ReadFloats(*store_, 3, 1), b);
  EXPECT_EQ(ReadFloats(*store_, 2, 1), a);
}

TEST_F(RocksStoreTest, CommitExistingStepNeedsReplace) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  auto a = NormalFloats(100, 5);
  auto b = NormalFloats(50, 6);
  ASSERT_TRUE(WriteSnapshot(*store_, 1, {{1, &a}, {2, &a}}, "old").ok());
  auto again = WriteSnapshot(*store_, 1, {{1, &b}});
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ReadFloats(*store_, 1, 1), a);

  SnapshotOptions replace;
  replace.replace_existing = true;
  ASSERT_TRUE(WriteSnapshot(*store_, 1, {{1, &b}}, "new", replace).ok());
  EXPECT_EQ(ReadFloats(*store_, 1, 1), b);
  auto tensors = store_->Tensors(1);
  ASSERT_TRUE(tensors.ok());
  EXPECT_EQ(tensors->size(), 1u);  // param 2 of the old snapshot is gone
  EXPECT_EQ(store_->Manifest(1).value(), "new");
}

// Store::Contains as "yes", "no" or its error, so that a failure shows which.
std::string ContainsText(Store& store, int64_t step) {
  Result<bool> stored = store.Contains(step);
  if (!stored.ok()) return stored.status().ToString();
  return *stored ? "yes" : "no";
}

TEST_F(RocksStoreTest, NotFoundErrors) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  auto a = NormalFloats(10, 8);
  ASSERT_TRUE(WriteSnapshot(*store_, 1, {{1, &a}}).ok());
  EXPECT_EQ(store_->Info(2).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ContainsText(*store_, 2), "no");  // absence is an answer, not an error
  EXPECT_EQ(ContainsText(*store_, 1), "yes");
  EXPECT_EQ(store_->Manifest(2).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Tensors(2).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Tensor(1, 2, "param").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Tensor(1, 1, "grad").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Delete(2).code(), StatusCode::kNotFound);
  StoreOptions no_create;
  no_create.create_if_missing = false;
  EXPECT_EQ(Store::Open(dir_.Sub("missing"), no_create).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Store::OpenReadOnly(dir_.Sub("missing")).status().code(), StatusCode::kNotFound);
}

TEST_F(RocksStoreTest, DeleteHidesSnapshotAndKeepsOthers) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  auto a = NormalFloats(2000, 9);
  auto b = NormalFloats(2000, 10);
  ASSERT_TRUE(WriteSnapshot(*store_, 1, {{1, &a}}).ok());
  ASSERT_TRUE(WriteSnapshot(*store_, 2, {{1, &b}}).ok());
  ASSERT_TRUE(store_->Delete(1).ok());
  EXPECT_EQ(store_->Info(1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ContainsText(*store_, 1), "no");
  EXPECT_EQ(ContainsText(*store_, 2), "yes");
  EXPECT_EQ(store_->Tensor(1, 1, "param").status().code(), StatusCode::kNotFound);
  auto list = store_->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].step, 2);
  EXPECT_EQ(ReadFloats(*store_, 2, 1), b);
}

std::vector<int64_t> Steps(Store& store) {
  auto list = store.List();
  EXPECT_TRUE(list.ok()) << list.status().ToString();
  std::vector<int64_t> steps;
  if (list.ok()) {
    for (const auto& i : *list) steps.push_back(i.step);
  }
  return steps;
}

uint64_t StoredBytes(const TensorRecord& r) {
  uint64_t sum = 0;
  for (const auto& c : r.chunks) sum += c.stored_bytes;
  return sum;
}

TEST_F(RocksStoreTest, DeleteThenGcReclaimsExactlyTheUnreferencedChunks) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  auto a = NormalFloats(3000, 11);  // 3 chunks, shared by both snapshots
  auto b = NormalFloats(5000, 12);  // 5 chunks, only in step 1
  auto c = NormalFloats(1000, 13);  // 1 chunk, only in step 2
  ASSERT_TRUE(WriteSnapshot(*store_, 1, {{1, &a}, {2, &b}}).ok());
  ASSERT_TRUE(WriteSnapshot(*store_, 2, {{1, &a}, {3, &c}}).ok());
  auto b_record = store_->Tensor(1, 2, "param");
  ASSERT_TRUE(b_record.ok());

  auto nothing = store_->CollectGarbage();
  ASSERT_TRUE(nothing.ok());
  EXPECT_EQ(nothing->chunks_scanned, 9u);
  EXPECT_EQ(nothing->chunks_deleted, 0u);
  EXPECT_EQ(nothing->chunks_live, 9u);

  ASSERT_TRUE(store_->Delete(1).ok());
  auto before = store_->Stats();
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->collectable_chunks, 5u);
  EXPECT_EQ(before->collectable_bytes, StoredBytes(*b_record));

  std::vector<std::pair<uint64_t, uint64_t>> progress;
  auto gc = store_->CollectGarbage([&](uint64_t done, uint64_t total) { progress.emplace_back(done, total); });
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->chunks_scanned, 9u);
  EXPECT_EQ(gc->chunks_deleted, 5u);
  EXPECT_EQ(gc->bytes_deleted, StoredBytes(*b_record));
  EXPECT_EQ(gc->chunks_live, 4u);
  ASSERT_EQ(progress.size(), 9u);
  EXPECT_EQ(progress.back().first, 9u);

  auto after = store_->Stats();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->chunks, 4u);
  EXPECT_EQ(after->collectable_chunks, 0u);
  EXPECT_EQ(after->chunk_stored_bytes, before->chunk_stored_bytes - StoredBytes(*b_record));
  EXPECT_EQ(ReadFloats(*store_, 2, 1), a);
  EXPECT_EQ(ReadFloats(*store_, 2, 3), c);
  // The deleted tensor's chunks are gone for real.
  std::vector<float> out(b.size());
  EXPECT_EQ(store_->ReadTensor(*b_record, out.data(), b.size() * 4).code(), StatusCode::kCorruption);
}

TEST_F(RocksStoreTest, GcSparesChunksOfWritersInFlight) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  auto a = NormalFloats(2000, 14);
  auto d = NormalFloats(2000, 15);
  ASSERT_TRUE(WriteSnapshot(*store_, 1, {{1, &a}}).ok());

  auto writer = store_->BeginSnapshot(2);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->AddTensor(View(1, "param", a)).ok());  // dedups against step 1
  ASSERT_TRUE((*writer)->AddTensor(View(2, "param", d)).ok());  // new, uncommitted
  ASSERT_TRUE(store_->Delete(1).ok());
  auto gc = store_->CollectGarbage();
  ASSERT_TRUE(gc.ok());
  // The index holds committed chunks only: step 1's two, pinned by the
  // writer. Its two new chunks are in the pack, indexed by its commit; the
  // pack (half of it unindexed) is not compacted while the writer lives.
  EXPECT_EQ(gc->chunks_scanned, 2u);
  EXPECT_EQ(gc->chunks_deleted, 0u);
  EXPECT_EQ(gc->packs_removed, 0u);
  EXPECT_EQ(gc->pack_bytes_rewritten, 0u);
  ASSERT_TRUE((*writer)->Commit().ok());
  writer->reset();
  EXPECT_EQ(ReadFloats(*store_, 2, 1), a);
  EXPECT_EQ(ReadFloats(*store_, 2, 2), d);

  // An abandoned writer's chunks were never indexed: unreferenced pack
  // bytes (its 3 chunks, alone in the pack begun after the last gc), which
  // the next collection deletes with their pack.
  auto e = NormalFloats(3000, 16);
  auto abandoned = store_->BeginSnapshot(3);
  ASSERT_TRUE(abandoned.ok());
  ASSERT_TRUE((*abandoned)->AddTensor(View(1, "param", e)).ok());
  abandoned->reset();
  EXPECT_EQ(store_->Info(3).status().code(), StatusCode::kNotFound);
  auto stats = store_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->packs, 2u);
  const uint64_t abandoned_bytes = stats->pack_garbage_bytes;
  EXPECT_GE(abandoned_bytes, 3 * 16u + 1000u);  // 3 chunk headers and 12000 raw bytes, maybe compressed
  EXPECT_LE(abandoned_bytes, 3 * 16u + 12000u);
  const uint64_t pack_bytes_before = stats->pack_bytes;
  gc = store_->CollectGarbage();
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(gc->chunks_scanned, 4u);
  EXPECT_EQ(gc->chunks_deleted, 0u);
  EXPECT_EQ(gc->packs_removed, 1u);
  EXPECT_EQ(gc->pack_bytes_rewritten, 0u);
  EXPECT_EQ(gc->pack_bytes_freed, 8 + abandoned_bytes);
  stats = store_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->packs, 1u);
  EXPECT_EQ(stats->pack_bytes, pack_bytes_before - 8 - abandoned_bytes);
  EXPECT_EQ(stats->pack_garbage_bytes, 0u);
  EXPECT_EQ(ReadFloats(*store_, 2, 2), d);
}

TEST_F(RocksStoreTest, RollbackDeletesLaterSnapshots) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  std::vector<std::vector<float>> data;
  for (int i = 0; i < 5; ++i) data.push_back(NormalFloats(1000, 20 + i));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(WriteSnapshot(*store_, i + 1, {{7, &data[i]}}).ok());
  EXPECT_EQ(store_->Rollback(10).code(), StatusCode::kNotFound);
  EXPECT_EQ(Steps(*store_), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  ASSERT_TRUE(store_->Rollback(3).ok());
  EXPECT_EQ(Steps(*store_), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(store_->Latest().value(), std::optional<int64_t>(3));
  EXPECT_EQ(store_->Tensor(4, 7, "param").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->Rollback(3).ok());  // nothing later: no-op
  auto gc = store_->CollectGarbage();
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(gc->chunks_deleted, 2u);
  EXPECT_EQ(ReadFloats(*store_, 3, 7), data[2]);
  // Training continues from step 3: step 4 can be written again.
  ASSERT_TRUE(WriteSnapshot(*store_, 4, {{7, &data[0]}}).ok());
  EXPECT_EQ(ReadFloats(*store_, 4, 7), data[0]);
}

TEST_F(RocksStoreTest, ReopenKeepsEverything) {
  auto a = NormalFloats(300000, 30);  // 1.2 MB: two chunks of the default 1 MiB
  auto b = NormalFloats(10, 31);
  std::vector<SnapshotInfo> infos;
  {
    StoreOptions o;
    o.sync = false;
    ASSERT_NO_FATAL_FAILURE(OpenStore(o));
    EXPECT_EQ(store_->chunk_bytes(), size_t{1} << 20);
    ASSERT_TRUE(WriteSnapshot(*store_, 1, {{1, &a}, {2, &b}}, "one").ok());
    ASSERT_TRUE(WriteSnapshot(*store_, 2, {{1, &b}}, "two").ok());
    infos = store_->List().value();
    store_.reset();
  }
  ASSERT_NO_FATAL_FAILURE(OpenStore(StoreOptions()));
  EXPECT_EQ(store_->chunk_bytes(), size_t{1} << 20);
  auto again = store_->List();
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ((*again)[i].step, infos[i].step);
    EXPECT_EQ((*again)[i].created_unix_ms, infos[i].created_unix_ms);
    EXPECT_EQ((*again)[i].stored_bytes, infos[i].stored_bytes);
    EXPECT_EQ((*again)[i].new_bytes, infos[i].new_bytes);
    EXPECT_EQ((*again)[i].manifest_bytes, infos[i].manifest_bytes);
  }
  EXPECT_EQ(ReadFloats(*store_, 1, 1), a);
  EXPECT_EQ(ReadFloats(*store_, 1, 2), b);
  EXPECT_EQ(store_->Manifest(2).value(), "two");
  // Dedup works against chunks written before the reopen.
  auto third = WriteSnapshot(*store_, 3, {{1, &a}});
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->new_chunks, 0u);
  EXPECT_EQ(third->stored_bytes, (*again)[0].stored_bytes - (*again)[1].stored_bytes);
  auto stats = store_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->snapshots, 3u);
  EXPECT_EQ(stats->chunks, 3u);
  EXPECT_EQ(stats->chunk_raw_bytes, a.size() * 4 + b.size() * 4);
  EXPECT_EQ(stats->chunk_stored_bytes, infos[0].new_bytes);
  EXPECT_EQ(stats->logical_bytes, 2 * a.size() * 4 + 2 * b.size() * 4);
  EXPECT_EQ(stats->referenced_bytes, infos[0].stored_bytes + infos[1].stored_bytes + third->stored_bytes);
  // Every chunk byte was written once, to one pack file (after its 8-byte
  // header); the WAL, which reopening replays without flushing (a full
  // disk must not stop an open), holds only index entries and records.
  EXPECT_EQ(stats->packs, 1u);
  EXPECT_EQ(stats->pack_bytes, 8 + infos[0].new_bytes + infos[1].new_bytes);
  EXPECT_EQ(stats->pack_garbage_bytes, 0u);
  EXPECT_LT(stats->wal_bytes, 16u << 10);
  // gc flushes: the index goes to table files; the pack, all live, stays.
  auto gc = store_->CollectGarbage();
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(gc->packs_removed, 0u);
  EXPECT_EQ(gc->pack_bytes_rewritten, 0u);
  stats = store_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->pack_bytes, 8 + infos[0].new_bytes + infos[1].new_bytes);
  EXPECT_GT(stats->sst_bytes, 0u);
  EXPECT_EQ(stats->wal_bytes, 0u);
}

TEST_F(RocksStoreTest, FixedOptionsAndFormatVersionAreChecked) {
  TempDir dir;
  {
    auto store = Store::Open(dir.Sub("s"), SmallChunks());
    ASSERT_TRUE(store.ok());
  }
  StoreOptions other = SmallChunks();
  other.chunk_bytes = 8192;
  auto mismatch = Store::Open(dir.Sub("s"), other);
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("chunk_bytes 8192 differs from the store's fixed chunk_bytes 4096"),
            std::string::npos)
      << mismatch.status().message();
  {
    RawDb raw(dir.Sub("s"));
    ASSERT_TRUE(raw.ok()) << raw.error();
    std::string value;
    ASSERT_TRUE(raw.db()->Get(rocksdb::ReadOptions(), raw.meta(), "store", &value).ok());
    proto::StoreMeta meta;
    ASSERT_TRUE(meta.ParseFromString(value));
    EXPECT_EQ(meta.format_version(), 7u);
    EXPECT_EQ(meta.chunk_bytes(), 4096u);
    EXPECT_EQ(meta.hash(), "xxh3-128");
    meta.set_format_version(99);
    ASSERT_TRUE(raw.db()->Put(rocksdb::WriteOptions(), raw.meta(), "store", meta.SerializeAsString()).ok());
  }
  auto future = Store::Open(dir.Sub("s"));
  EXPECT_EQ(future.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(future.status().message().find("store format version 99 is not supported (this build reads versions 6..7; it "
                                                  "was written by a newer build)"),
            std::string::npos)
      << future.status().message();
  EXPECT_NE(future.status().message().find(dir.Sub("s")), std::string::npos);
  EXPECT_EQ(Store::OpenReadOnly(dir.Sub("s")).status().code(), StatusCode::kNotSupported);
}

TEST_F(RocksStoreTest, SecondWriterInProcessIsBusy) {
  TempDir dir;
  auto first = Store::Open(dir.Sub("s"), SmallChunks());
  ASSERT_TRUE(first.ok());
  auto second = Store::Open(dir.Sub("s"), SmallChunks());
  EXPECT_EQ(second.status().code(), StatusCode::kBusy);
  EXPECT_NE(second.status().message().find(dir.Sub("s")), std::string::npos) << second.status().message();
}

// Exit codes of the child below; 0 = every check passed.
enum ChildExit { kChildOk = 0, kChildNotBusy = 10, kChildReadOnlyFailed = 11, kChildWrongSnapshots = 12 };

TEST_F(RocksStoreTest, SecondWriterProcessIsBusyAndReadersSeeCommits) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  // Fork before opening: a child of a process holding the store inherits its lock state.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(ready[1]);
    char byte;
    if (read(ready[0], &byte, 1) != 1) _exit(2);
    auto writer = Store::Open(path, SmallChunks());
    if (writer.ok() || writer.status().code() != StatusCode::kBusy ||
        writer.status().message().find(path) == std::string::npos) {
      _exit(kChildNotBusy);
    }
    auto reader = Store::OpenReadOnly(path);
    if (!reader.ok()) _exit(kChildReadOnlyFailed);
    auto list = (*reader)->List();
    if (!list.ok() || list->size() != 1 || (*list)[0].step != 5) _exit(kChildWrongSnapshots);
    _exit(kChildOk);
  }
  close(ready[0]);
  {
    auto store = Store::Open(path, SmallChunks());
    ASSERT_TRUE(store.ok());
    auto a = NormalFloats(100, 40);
    ASSERT_TRUE(WriteSnapshot(**store, 5, {{1, &a}}).ok());
    ASSERT_EQ(write(ready[1], "x", 1), 1);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), kChildOk);
  }
  close(ready[1]);
}

TEST_F(RocksStoreTest, ReadOnlyOpenerSeesOnlyCommittedSnapshots) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  auto writer_store = Store::Open(path, SmallChunks());
  ASSERT_TRUE(writer_store.ok());
  auto a = NormalFloats(3000, 50);
  auto b = NormalFloats(3000, 51);
  ASSERT_TRUE(WriteSnapshot(**writer_store, 1, {{1, &a}}).ok());

  auto reader = Store::OpenReadOnly(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_TRUE((*reader)->read_only());
  EXPECT_EQ((*reader)->chunk_bytes(), 4096u);
  EXPECT_EQ(Steps(**reader), (std::vector<int64_t>{1}));

  auto writer = (*writer_store)->BeginSnapshot(2);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->AddTensor(View(1, "param", b)).ok());  // chunks written, not committed
  ASSERT_TRUE((*reader)->Refresh().ok());
  EXPECT_EQ(Steps(**reader), (std::vector<int64_t>{1}));
  EXPECT_EQ((*reader)->Info(2).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ContainsText(**reader, 2), "no");
  ASSERT_TRUE((*writer)->Commit().ok());
  EXPECT_EQ(Steps(**reader), (std::vector<int64_t>{1}));  // not refreshed yet
  ASSERT_TRUE((*reader)->Refresh().ok());
  EXPECT_EQ(Steps(**reader), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ContainsText(**reader, 2), "yes");
  EXPECT_EQ(ReadFloats(**reader, 2, 1), b);
  EXPECT_EQ(ReadFloats(**reader, 1, 1), a);
  auto verify = (*reader)->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok());
  EXPECT_EQ(verify->chunks, 6u);
  EXPECT_EQ(verify->bytes, 24000u);

  // Deletes and garbage collection by the writer show after a refresh.
  ASSERT_TRUE((*writer_store)->Delete(1).ok());
  ASSERT_TRUE((*writer_store)->CollectGarbage().ok());
  EXPECT_EQ(Steps(**reader), (std::vector<int64_t>{1, 2}));
  ASSERT_TRUE((*reader)->Refresh().ok());
  EXPECT_EQ(Steps(**reader), (std::vector<int64_t>{2}));
  EXPECT_EQ(ReadFloats(**reader, 2, 1), b);
  auto tensors = (*reader)->Tensors(2);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  ASSERT_EQ(tensors->size(), 1u);
  EXPECT_EQ((*tensors)[0].chunks.size(), 3u);
  auto stats = (*reader)->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->chunks, 3u);

  EXPECT_EQ((*reader)->BeginSnapshot(3).status().code(), StatusCode::kNotSupported);
  EXPECT_EQ((*reader)->Delete(1).code(), StatusCode::kNotSupported);
  EXPECT_EQ((*reader)->Rollback(1).code(), StatusCode::kNotSupported);
  EXPECT_EQ((*reader)->CollectGarbage().status().code(), StatusCode::kNotSupported);
  EXPECT_EQ((*reader)->Prune({1, 0}).status().code(), StatusCode::kNotSupported);
}

TEST_F(RocksStoreTest, CorruptChunkIsNamedAndOtherSnapshotsStillRead) {
  const std::string path = StorePath();
  auto a = NormalFloats(3000, 60);  // 12000 bytes: chunks of 4096, 4096, 3808
  auto b = NormalFloats(3000, 61);
  TensorRecord victim;
  {
    ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
    ASSERT_TRUE(WriteSnapshot(*store_, 1, {{1, &a}}).ok());
    ASSERT_TRUE(WriteSnapshot(*store_, 2, {{1, &b}}).ok());
    victim = store_->Tensor(1, 1, "param").value();
    store_.reset();
  }
  {
    RawDb raw(path);
    ASSERT_TRUE(raw.ok()) << raw.error();
    // A byte in the middle of chunk 1's payload (past the 16-byte header).
    raw.FlipChunkByte(victim.chunks[1].hash, 100);
  }
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  auto report = store_->Verify();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->snapshots, 2u);
  EXPECT_EQ(report->tensors, 2u);
  EXPECT_EQ(report->chunks, 6u);
  EXPECT_EQ(report->bytes, 24000u - 4096u);  // every chunk but the damaged one
  ASSERT_EQ(report->problems.size(), 1u);
  const VerifyProblem& p = report->problems[0];
  EXPECT_EQ(p.step, 1);
  EXPECT_EQ(p.param_id, 1u);
  EXPECT_EQ(p.role, "param");
  EXPECT_EQ(p.chunk_index, 1);
  EXPECT_EQ(p.hash, victim.chunks[1].hash);
  EXPECT_EQ(p.status.code(), StatusCode::kCorruption);
  EXPECT_NE(p.status.message().find(victim.chunks[1].hash.Hex()), std::string::npos) << p.status.message();
  EXPECT_NE(p.status.message().find("step 1: tensor param_id 0x0000000000000001 role param: chunk 1"), std::string::npos)
      << p.status.message();

  auto only_two = store_->Verify(2);
  ASSERT_TRUE(only_two.ok());
  EXPECT_TRUE(only_two->ok());
  EXPECT_EQ(only_two->snapshots, 1u);
  EXPECT_EQ(store_->Verify(3).status().code(), StatusCode::kNotFound);

  std::vector<float> out(a.size());
  Status read = store_->ReadTensor(victim, out.data(), a.size() * 4);
  EXPECT_EQ(read.code(), StatusCode::kCorruption);
  EXPECT_NE(read.message().find(victim.chunks[1].hash.Hex()), std::string::npos) << read.message();
  EXPECT_EQ(ReadFloats(*store_, 2, 1), b);
}

TEST_F(RocksStoreTest, RawChunkBitFlipIsAHashMismatch) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  std::vector<uint8_t> noise(10000);
  std::mt19937 rng(70);
  for (auto& x : noise) x = static_cast<uint8_t>(rng());
  TensorRecord record;
  {
    auto store = Store::Open(path, SmallChunks());
    ASSERT_TRUE(store.ok());
    auto writer = (*store)->BeginSnapshot(1);
    ASSERT_TRUE(writer.ok());
    TensorView v;
    v.param_id = 3;
    v.role = "buffer";
    v.dtype = DType::kUInt8;
    v.shape = {10000};
    v.data = noise.data();
    v.size_bytes = noise.size();
    ASSERT_TRUE((*writer)->AddTensor(v).ok());
    auto info = (*writer)->Commit();
    ASSERT_TRUE(info.ok());
    // Incompressible: stored raw, 16-byte header + payload per chunk.
    EXPECT_EQ(info->stored_bytes, 10000u + 3 * 16u);
    record = (*store)->Tensor(1, 3, "buffer").value();
  }
  {
    RawDb raw(path);
    ASSERT_TRUE(raw.ok());
    raw.FlipChunkByte(record.chunks[2].hash, 16 + 5);
  }
  auto store = Store::OpenReadOnly(path);
  ASSERT_TRUE(store.ok());
  std::vector<uint8_t> out(noise.size());
  Status read = (*store)->ReadTensor(record, out.data(), out.size());
  EXPECT_EQ(read.code(), StatusCode::kCorruption);
  EXPECT_NE(read.message().find("chunk " + record.chunks[2].hash.Hex() + ": hash mismatch"), std::string::npos)
      << read.message();
}

TEST_F(RocksStoreTest, MissingChunkIsReported) {
  const std::string path = StorePath();
  auto a = NormalFloats(2000, 80);
  TensorRecord record;
  {
    ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
    ASSERT_TRUE(WriteSnapshot(*store_, 4, {{2, &a}}).ok());
    record = store_->Tensor(4, 2, "param").value();
    store_.reset();
  }
  {
    RawDb raw(path);
    ASSERT_TRUE(raw.ok());
    ASSERT_TRUE(
        raw.db()->Delete(rocksdb::WriteOptions(), raw.chunks(), internal::EncodeChunkKey(record.chunks[0].hash)).ok());
  }
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  auto report = store_->Verify();
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->problems.size(), 1u);
  EXPECT_EQ(report->problems[0].status.code(), StatusCode::kNotFound);
  EXPECT_EQ(report->problems[0].chunk_index, 0);
  EXPECT_EQ(report->problems[0].step, 4);
  std::vector<float> out(a.size());
  EXPECT_EQ(store_->ReadTensor(record, out.data(), a.size() * 4).code(), StatusCode::kCorruption);
}

TEST_F(RocksStoreTest, PruneKeepsLastAndEvery) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  std::vector<std::vector<float>> data;
  for (int i = 0; i < 10; ++i) data.push_back(NormalFloats(1000, 90 + i));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(WriteSnapshot(*store_, i + 1, {{1, &data[i]}}).ok());
  auto none = store_->Prune({0, 0});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->deleted_steps.empty());
  EXPECT_EQ(Steps(*store_).size(), 10u);
  auto report = store_->Prune({3, 4});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->deleted_steps, (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(report->gc.chunks_deleted, 6u);
  EXPECT_EQ(report->gc.chunks_live, 4u);
  EXPECT_EQ(Steps(*store_), (std::vector<int64_t>{4, 8, 9, 10}));
  EXPECT_EQ(ReadFloats(*store_, 4, 1), data[3]);
  EXPECT_EQ(store_->Prune({-1, 0}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(RocksStoreTest, RetentionAppliesAfterEveryCommit) {
  StoreOptions o = SmallChunks();
  o.retention.keep_last = 2;
  ASSERT_NO_FATAL_FAILURE(OpenStore(o));
  auto shared = NormalFloats(1000, 100);
  std::vector<std::vector<float>> data;
  for (int i = 0; i < 5; ++i) data.push_back(NormalFloats(1000, 101 + i));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(WriteSnapshot(*store_, i + 1, {{1, &data[i]}, {2, &shared}}).ok());
  EXPECT_EQ(Steps(*store_), (std::vector<int64_t>{4, 5}));
  auto stats = store_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->chunks, 3u);  // data[3], data[4], shared
  EXPECT_EQ(stats->collectable_chunks, 0u);
  EXPECT_EQ(ReadFloats(*store_, 4, 2), shared);
  EXPECT_EQ(ReadFloats(*store_, 5, 1), data[4]);
}

TEST_F(RocksStoreTest, DiskFullFailsTheSnapshotAndTheStoreRecovers) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  auto fs = std::make_shared<FaultInjectionFS>();
  auto env = NewFaultInjectionEnv(fs);
  StoreOptions o = SmallChunks();
  o.sync = true;
  auto a = NormalFloats(5000, 110);
  auto b = NormalFloats(5000, 111);
  auto c = NormalFloats(5000, 112);
  {
    auto store = internal::RocksStore::OpenWritable(path, o, env.get());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &a}}).ok());

    fs->SetByteBudget(1000);  // the disk fills up while step 2 is written
    auto full = WriteSnapshot(**store, 2, {{1, &b}});
    ASSERT_FALSE(full.ok());
    EXPECT_EQ(full.status().code(), StatusCode::kNoSpace) << full.status().ToString();
    EXPECT_EQ((*store)->Info(2).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(Steps(**store), (std::vector<int64_t>{1}));
    // Still full: the next snapshot fails the same way instead of half-writing.
    EXPECT_EQ(WriteSnapshot(**store, 3, {{1, &c}}).status().code(), StatusCode::kNoSpace);

    fs->ClearFaults();  // space was freed
    auto after = WriteSnapshot(**store, 3, {{1, &c}});
    ASSERT_TRUE(after.ok()) << after.status().ToString();
    EXPECT_EQ(Steps(**store), (std::vector<int64_t>{1, 3}));
    EXPECT_EQ(ReadFloats(**store, 1, 1), a);
    EXPECT_EQ(ReadFloats(**store, 3, 1), c);
  }
  auto reopened = Store::Open(path, o);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ(Steps(**reopened), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(ReadFloats(**reopened, 1, 1), a);
  EXPECT_EQ(ReadFloats(**reopened, 3, 1), c);
  auto verify = (*reopened)->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok());
}

TEST_F(RocksStoreTest, GcRacingWritersNeverLosesAReferencedChunk) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  // A pool of contents that snapshots draw from, so that writers keep
  // deduplicating against chunks that deletes just made garbage.
  std::vector<std::vector<float>> contents;
  for (int i = 0; i < 6; ++i) contents.push_back(NormalFloats(2500, 200 + i));
  std::atomic<bool> done{false};
  std::atomic<int> gc_runs{0};
  std::thread collector([&] {
    while (!done.load()) {
      auto gc = store_->CollectGarbage();
      EXPECT_TRUE(gc.ok()) << gc.status().ToString();
      ++gc_runs;
    }
  });
  for (int step = 1; step <= 40; ++step) {
    const auto& x = contents[step % contents.size()];
    const auto& y = contents[(step * 7) % contents.size()];
    ASSERT_TRUE(WriteSnapshot(*store_, step, {{1, &x}, {2, &y}}).ok());
    if (step > 2) {
      ASSERT_TRUE(store_->Delete(step - 2).ok());
    }
    EXPECT_EQ(ReadFloats(*store_, step, 1), x);
    EXPECT_EQ(ReadFloats(*store_, step, 2), y);
  }
  done = true;
  collector.join();
  EXPECT_GT(gc_runs.load(), 0);
  EXPECT_EQ(Steps(*store_), (std::vector<int64_t>{39, 40}));
  auto verify = store_->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok()) << verify->problems[0].status.ToString();
  auto gc = store_->CollectGarbage();
  ASSERT_TRUE(gc.ok());
  auto stats = store_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->collectable_chunks, 0u);
  // Exactly the chunks of the two remaining snapshots are left.
  std::set<std::string> live;
  for (int64_t step : {39, 40}) {
    auto records = store_->Tensors(step);
    ASSERT_TRUE(records.ok());
    for (const auto& r : *records) {
      for (const auto& c : r.chunks) live.insert(c.hash.Hex());
    }
  }
  EXPECT_EQ(live.size(), 6u);  // steps 39 and 40 each hold one content twice: 2 x 3 chunks
  EXPECT_EQ(stats->chunks, live.size());
}

TEST_F(RocksStoreTest, TensorsAreOrderedByParamThenRole) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  auto a = NormalFloats(4, 300);
  auto writer = store_->BeginSnapshot(1);
  ASSERT_TRUE(writer.ok());
  for (auto [id, role] : std::vector<std::pair<uint64_t, std::string>>{
           {300, "param"}, {2, "param"}, {2, "exp_avg"}, {1ull << 40, "grad"}, {2, "exp_avg_sq"}}) {
    ASSERT_TRUE((*writer)->AddTensor(View(id, role, a)).ok());
  }
  ASSERT_TRUE((*writer)->Commit().ok());
  auto tensors = store_->Tensors(1);
  ASSERT_TRUE(tensors.ok());
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& t : *tensors) order.emplace_back(t.param_id, t.role);
  EXPECT_EQ(order, (std::vector<std::pair<uint64_t, std::string>>{
                       {2, "exp_avg"}, {2, "exp_avg_sq"}, {2, "param"}, {300, "param"}, {1ull << 40, "grad"}}));
}

// Enough tensors for record groups (snapshot format 2), whose order the
// writer sorts itself: roles that share their first 8 bytes, a role that is
// a prefix of another, bytes above 0x7f and an embedded NUL must come back
// in (param_id, role) byte order, as in the tensors column family.
TEST_F(RocksStoreTest, GroupedRecordsAreOrderedByParamThenRoleBytes) {
  ASSERT_NO_FATAL_FAILURE(OpenStore(SmallChunks()));
  auto a = NormalFloats(4, 301);
  const std::vector<std::string> roles = {"exp_avg_sq", "exp_avg_sz", "exp_avg", "exp_avg_", "param",
                                          "\xc3\xa9t\xc3\xa9", "grad", std::string("exp_avg\0x", 9), "e"};
  std::vector<std::pair<uint64_t, std::string>> keys;
  for (uint64_t i = 0; i < 40; ++i) {
    const uint64_t id = (i * 0x9e3779b97f4a7c15ull) ^ (i % 3 == 0 ? 7 : 0);  // scattered, a few high bits
    for (const std::string& role : roles) keys.emplace_back(id, role);
  }
  auto writer = store_->BeginSnapshot(1);
  ASSERT_TRUE(writer.ok());
  for (const auto& [id, role] : keys) ASSERT_TRUE((*writer)->AddTensor(View(id, role, a)).ok()) << role;
  ASSERT_TRUE((*writer)->Commit().ok());
  auto tensors = store_->Tensors(1);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& t : *tensors) order.emplace_back(t.param_id, t.role);
  std::sort(keys.begin(), keys.end());
  ASSERT_EQ(order.size(), 360u);
  EXPECT_EQ(order, keys);
  EXPECT_EQ(ReadFloats(*store_, 1, keys[17].first, keys[17].second), a);
}

TEST_F(RocksStoreTest, OpenCreatesMissingParentDirectories) {
  TempDir dir;
  const std::string path = dir.Sub("runs/lora/ckpt");
  auto store = Store::Open(path, SmallChunks());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->path(), path);
  auto a = NormalFloats(10, 400);
  ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &a}}).ok());
  EXPECT_TRUE(std::filesystem::exists(path + "/CURRENT"));
}

TEST_F(RocksStoreTest, RejectsBadOptions) {
  TempDir dir;
  StoreOptions o;
  o.zstd_level = 42;
  EXPECT_EQ(Store::Open(dir.Sub("s"), o).status().code(), StatusCode::kInvalidArgument);
  o = StoreOptions();
  o.threads = -1;
  EXPECT_EQ(Store::Open(dir.Sub("s"), o).status().code(), StatusCode::kInvalidArgument);
  o = StoreOptions();
  o.chunk_bytes = 8;  // smaller than a complex128 element
  EXPECT_EQ(Store::Open(dir.Sub("s"), o).status().code(), StatusCode::kInvalidArgument);
  o.chunk_bytes = (size_t{1} << 30) + 1;
  EXPECT_EQ(Store::Open(dir.Sub("s"), o).status().code(), StatusCode::kInvalidArgument);
  o.retention.keep_last = -2;
  o.chunk_bytes = 0;
  EXPECT_EQ(Store::Open(dir.Sub("s"), o).status().code(), StatusCode::kInvalidArgument);
  for (int nice : {-1, 20}) {
    o = StoreOptions();
    o.worker_nice = nice;
    Status s = Store::Open(dir.Sub("s"), o).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("worker_nice " + std::to_string(nice) + " is outside 0..19"), std::string::npos)
        << s.message();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("s")));  // nothing was created
}

// A store of an older format (chunk values in RocksDB, versions 1..4; no
// shared manifests, 5) is
// refused by every open with NotSupported naming both versions, and left as
// it was.
TEST_F(RocksStoreTest, OldFormatStoresAreRefusedNamingBothVersions) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  auto a = NormalFloats(3000, 21);
  {
    auto store = Store::Open(path, SmallChunks());
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &a}}).ok());
  }
  for (uint32_t old_version : {5u, 4u, 1u}) {
    {
      RawDb raw(path);
      ASSERT_TRUE(raw.ok()) << raw.error();
      proto::StoreMeta meta;
      std::string value;
      ASSERT_TRUE(raw.db()->Get(rocksdb::ReadOptions(), raw.meta(), "store", &value).ok());
      ASSERT_TRUE(meta.ParseFromString(value));
      meta.set_format_version(old_version);
      ASSERT_TRUE(raw.db()->Put(rocksdb::WriteOptions(), raw.meta(), "store", meta.SerializeAsString()).ok());
    }
    const std::string expected = "store format version " + std::to_string(old_version) +
                                 " is not supported (this build reads versions 6..7: chunks in pack files, shared "
                                 "manifests; stores of versions 1..5 are not converted)";
    for (bool read_only : {false, true}) {
      auto opened = read_only ? Store::OpenReadOnly(path) : Store::Open(path, SmallChunks());
      ASSERT_FALSE(opened.ok());
      EXPECT_EQ(opened.status().code(), StatusCode::kNotSupported);
      EXPECT_NE(opened.status().message().find(expected), std::string::npos) << opened.status().message();
    }
    RawDb raw(path);
    ASSERT_TRUE(raw.ok()) << raw.error();
    std::string value;
    ASSERT_TRUE(raw.db()->Get(rocksdb::ReadOptions(), raw.meta(), "store", &value).ok());
    proto::StoreMeta meta;
    ASSERT_TRUE(meta.ParseFromString(value));
    EXPECT_EQ(meta.format_version(), old_version);  // unchanged
  }
}

}  // namespace
}  // namespace trainsnap

namespace trainsnap {
namespace {

using namespace trainsnap::testing;

// The nice value of each of the store's worker threads.
std::vector<int> WorkerNices(Store& store) {
  auto& rocks = static_cast<internal::RocksStore&>(store);
  std::mutex mu;
  std::vector<int> nices;
  Status s = internal::RunOnEachThread(rocks.worker_pool(), static_cast<size_t>(rocks.threads()), [&] {
    std::lock_guard<std::mutex> lock(mu);
    nices.push_back(internal::ThreadNice());
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return nices;
}

TEST_F(RocksStoreTest, WorkerThreadsRunAtTheConfiguredNice) {
  const int base = internal::ThreadNice();
  StoreOptions o = SmallChunks();  // 2 threads
  o.worker_nice = 6;
  {
    ASSERT_NO_FATAL_FAILURE(OpenStore(o));
    EXPECT_EQ(WorkerNices(*store_), std::vector<int>(2, std::min(19, base + 6)));
    store_.reset();
  }
  o.worker_nice = 0;
  ASSERT_NO_FATAL_FAILURE(OpenStore(o));
  EXPECT_EQ(WorkerNices(*store_), std::vector<int>(2, base));
  EXPECT_EQ(internal::ThreadNice(), base);  // the opening thread keeps its priority
  EXPECT_EQ(StoreOptions().worker_nice, 19);  // the documented default
}

// Records the priority changes asked of RocksDB's thread pools (they are
// process-wide for the default Env, so the test must not really make them).
class PriorityRecordingEnv : public rocksdb::EnvWrapper {
 public:
  PriorityRecordingEnv() : rocksdb::EnvWrapper(rocksdb::Env::Default()) {}
  const char* Name() const override { return "PriorityRecordingEnv"; }
  rocksdb::Status LowerThreadPoolCPUPriority(Priority pool, rocksdb::CpuPriority priority) override {
    lowered.emplace_back(pool, priority);
    return rocksdb::Status::OK();
  }
  std::vector<std::pair<Priority, rocksdb::CpuPriority>> lowered;
};

// By default a store changes no thread outside trainsnap's own: RocksDB's
// (process-wide) pools are lowered only with lower_rocksdb_priority, then
// both of them, to the lowest priority.
TEST_F(RocksStoreTest, RocksDbThreadPriorityChangesOnlyWhenAskedFor) {
  EXPECT_FALSE(StoreOptions().lower_rocksdb_priority);  // the documented default
  PriorityRecordingEnv env;
  StoreOptions o = SmallChunks();
  {
    auto store = internal::RocksStore::OpenWritable(StorePath(), o, &env);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
  }
  EXPECT_TRUE(env.lowered.empty());
  o.lower_rocksdb_priority = true;
  {
    auto store = internal::RocksStore::OpenWritable(StorePath(), o, &env);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
  }
  using P = rocksdb::Env::Priority;
  const std::vector<std::pair<P, rocksdb::CpuPriority>> expected = {{P::HIGH, rocksdb::CpuPriority::kLow},
                                                                     {P::LOW, rocksdb::CpuPriority::kLow}};
  EXPECT_EQ(env.lowered, expected);
}

// compress = false: every new chunk is its 16-byte header plus the raw bytes,
// no deltas; chunks written either way read back after reopening either way.
TEST_F(RocksStoreTest, UncompressedStoreWritesRawChunksAndReadsBothKinds) {
  const std::string path = StorePath();
  // Compressible: a ramp of small integers.
  std::vector<float> ramp(3000);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i % 7);
  std::vector<float> drift = ramp;
  for (size_t i = 0; i < drift.size(); i += 97) drift[i] += 1.0f;  // a small change: a delta would pay
  StoreOptions raw = SmallChunks();  // 4096-byte chunks: 3 chunks of 4096, 4096, 3808 bytes
  raw.compress = false;
  {
    ASSERT_NO_FATAL_FAILURE(OpenStore(raw));
    auto first = WriteSnapshot(*store_, 1, {{1, &ramp}});
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    EXPECT_EQ(first->new_chunks, 3u);
    EXPECT_EQ(first->new_bytes, ramp.size() * sizeof(float) + 3 * 16);
    auto second = WriteSnapshot(*store_, 2, {{1, &drift}});
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    EXPECT_EQ(second->new_chunks, 3u);
    EXPECT_EQ(second->new_bytes, drift.size() * sizeof(float) + 3 * 16);  // raw, not a delta
    store_.reset();
  }
  StoreOptions compressed = SmallChunks();
  ASSERT_NO_FATAL_FAILURE(OpenStore(compressed));
  EXPECT_EQ(ReadFloats(*store_, 1, 1), ramp);
  EXPECT_EQ(ReadFloats(*store_, 2, 1), drift);
  std::vector<float> next = ramp;
  next[5] = 42.0f;
  auto third = WriteSnapshot(*store_, 3, {{1, &next}});
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->new_chunks, 1u);  // two chunks dedup against snapshot 1
  EXPECT_LT(third->new_bytes, 4096u / 4);  // compressed
  EXPECT_EQ(ReadFloats(*store_, 3, 1), next);
}

// ReadTensors reads many tensors (many MultiGet batches) bit-exact, and
// reports the first failing read in argument order, by its name.
TEST_F(RocksStoreTest, ReadTensorsReadsManyAndNamesTheFirstFailure) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  std::vector<std::vector<float>> data;
  for (uint32_t i = 0; i < 5; ++i) data.push_back(NormalFloats(10000 + 1000 * i, 300 + i));  // 10..14 chunks each
  std::vector<TensorRecord> records;
  {
    auto store = Store::Open(path, SmallChunks());
    ASSERT_TRUE(store.ok());
    std::vector<std::pair<uint64_t, const std::vector<float>*>> tensors;
    for (size_t i = 0; i < data.size(); ++i) tensors.push_back({i + 1, &data[i]});
    ASSERT_TRUE(WriteSnapshot(**store, 1, tensors).ok());
    auto all = (*store)->Tensors(1);
    ASSERT_TRUE(all.ok());
    records = *all;
    ASSERT_EQ(records.size(), data.size());

    std::vector<std::vector<float>> out(data.size());
    std::vector<TensorRead> reads(data.size());
    for (size_t i = 0; i < data.size(); ++i) {
      out[i].assign(data[i].size(), -1.0f);
      reads[i] = {&records[i], out[i].data(), out[i].size() * sizeof(float), "tensor " + std::to_string(i)};
    }
    ASSERT_TRUE((*store)->ReadTensors(reads).ok());
    EXPECT_EQ(out, data);

    reads[2].dst_bytes -= 4;
    Status bad = (*store)->ReadTensors(reads);
    EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.message().find("tensor 2: destination has"), std::string::npos) << bad.message();
    reads[2].dst_bytes += 4;
    reads[3].record = nullptr;
    EXPECT_EQ((*store)->ReadTensors(reads).code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE((*store)->ReadTensors({}).ok());
  }
  {
    // Delete a late chunk of tensor 3 and an early one of tensor 4.
    RawDb raw(path);
    ASSERT_TRUE(raw.ok());
    for (auto [t, c] : {std::pair<size_t, size_t>{3, 11}, {4, 0}}) {
      ASSERT_TRUE(raw.db()
                      ->Delete(rocksdb::WriteOptions(), raw.chunks(), internal::EncodeChunkKey(records[t].chunks[c].hash))
                      .ok());
    }
  }
  auto store = Store::Open(path, SmallChunks());
  ASSERT_TRUE(store.ok());
  std::vector<std::vector<float>> out(data.size());
  std::vector<TensorRead> reads;
  for (size_t i = 0; i < data.size(); ++i) {
    out[i].resize(data[i].size());
    reads.push_back({&records[i], out[i].data(), out[i].size() * sizeof(float), "tensor " + std::to_string(i)});
  }
  Status s = (*store)->ReadTensors(reads);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("tensor 3: chunk 11"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("missing from the store"), std::string::npos) << s.message();
  // The other tensors still read alone.
  for (size_t i : {0, 1, 2}) {
    ASSERT_TRUE((*store)->ReadTensors({reads[i]}).ok());
    EXPECT_EQ(out[i], data[i]);
  }
  std::reverse(reads.begin(), reads.end());
  s = (*store)->ReadTensors(reads);
  EXPECT_NE(s.message().find("tensor 4: chunk 0"), std::string::npos) << s.message();
}


// Verify reads every table file the MANIFEST lists. Background flushes and
// compactions replace table files all the time (here: a flush after every
// commit, so L0 compactions run every few commits); a file they replace
// while Verify lists and reads the tables must not be reported missing.
// Before Verify held table deletions, 3 of 4 runs of this test reported 7 to
// 144 missing table files (a race, so a run can miss it).
TEST_F(RocksStoreTest, VerifyDuringCompactionsReportsNoMissingTableFile) {
  StoreOptions options = TestStoreOptions(/*sync=*/false);
  options.max_unflushed_commits = 1;
  ASSERT_NO_FATAL_FAILURE(OpenStore(options));
  std::atomic<bool> stop{false};
  std::atomic<int> committed{0};
  Status writer_status;
  std::thread writer([&] {
    for (int64_t step = 1; !stop.load(); ++step) {
      std::vector<std::vector<float>> values(4, std::vector<float>(64));
      std::vector<std::pair<uint64_t, const std::vector<float>*>> tensors;
      for (uint64_t id = 1; id <= 4; ++id) {
        for (size_t i = 0; i < 64; ++i) values[id - 1][i] = static_cast<float>(step * 1000 + id * 100 + i);
        tensors.push_back({id, &values[id - 1]});
      }
      Result<SnapshotInfo> info = WriteSnapshot(*store_, step, tensors);
      if (!info.ok()) {
        writer_status = info.status();
        return;
      }
      committed.fetch_add(1);
    }
  });
  int verifies = 0;
  int store_problems = 0;
  std::string first_problem;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (committed.load() < 400 && std::chrono::steady_clock::now() < deadline) {
    Result<VerifyReport> report = store_->Verify();
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    for (const VerifyProblem& p : report->problems) {
      if (first_problem.empty()) first_problem = p.status.ToString();
      ++store_problems;
    }
    ++verifies;
  }
  stop = true;
  writer.join();
  EXPECT_TRUE(writer_status.ok()) << writer_status.ToString();
  EXPECT_GE(committed.load(), 100) << "too few commits in 60 s to flush and compact";
  EXPECT_GT(verifies, 10);
  EXPECT_EQ(store_problems, 0) << "after " << verifies << " verifies: " << first_problem;
  std::printf("[ verify-race ] %d verifies during %d commits, %d problems\n", verifies, committed.load(),
              store_problems);
}

}  // namespace
}  // namespace trainsnap
