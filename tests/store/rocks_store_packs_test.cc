// The pack-file data path of RocksStore (docs/format.md "Pack files",
// docs/reliability.md): what a crash, a power loss, an I/O fault or damage
// to a pack leaves, and compaction killed at each of its steps.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "raw_db.h"
#include "store/chunk_codec.h"
#include "store/kill_point.h"
#include "store/pack_set.h"
#include "store/rocks_store.h"
#include "store/store_test_util.h"
#include "testing/temp_dir.h"
#include "testing/fault_injection_fs.h"

namespace trainsnap::testing {
namespace {

namespace fs = std::filesystem;

// The kit's TestStoreOptions, chunks stored raw (uncompressed).
StoreOptions RawChunks(bool sync = false) {
  StoreOptions o = TestStoreOptions(sync);
  o.compress = false;
  return o;
}

std::string Pack(const std::string& store, uint32_t pack) {
  return store + "/" + internal::kPackDir + "/" + internal::PackFileName(pack);
}

// Raw chunks: 16-byte header + bytes, after the pack's 8-byte header.
uint64_t RawPackBytes(size_t floats) {
  const uint64_t bytes = floats * sizeof(float);
  const uint64_t chunks = (bytes + 4095) / 4096;
  return 8 + chunks * 16 + bytes;
}

// What a crash leaves (a capture that appended chunks and never committed)
// is removed by the next writable open: the uncommitted tail of a pack
// with committed chunks is truncated, a pack with none is deleted.
TEST(PackRecoveryTest, OpenTruncatesUncommittedTailsAndDeletesUnreferencedPacks) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  auto a = NormalFloats(3000, 1);
  auto b = NormalFloats(5000, 2);
  {
    auto store = Store::Open(path, RawChunks());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &a}}).ok());
    auto abandoned = (*store)->BeginSnapshot(2);
    ASSERT_TRUE(abandoned.ok());
    ASSERT_TRUE((*abandoned)->AddTensor(View(2, "param", b)).ok());
  }
  EXPECT_EQ(fs::file_size(Pack(path, 1)), RawPackBytes(3000) + RawPackBytes(5000) - 8);
  {
    auto store = Store::Open(path, RawChunks());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ(fs::file_size(Pack(path, 1)), RawPackBytes(3000));  // truncated after step 1's chunks
    EXPECT_EQ(ReadFloats(**store, 1, 1), a);
    // The chunks of the abandoned capture were never committed: written again.
    auto abandoned = (*store)->BeginSnapshot(2);
    ASSERT_TRUE(abandoned.ok());
    ASSERT_TRUE((*abandoned)->AddTensor(View(2, "param", b)).ok());
  }
  ASSERT_TRUE(fs::exists(Pack(path, 2)));  // the second process's pack: all uncommitted
  EXPECT_EQ(fs::file_size(Pack(path, 2)), RawPackBytes(5000));
  auto store = Store::Open(path, RawChunks());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_FALSE(fs::exists(Pack(path, 2)));
  EXPECT_EQ(ReadFloats(**store, 1, 1), a);
  auto info = WriteSnapshot(**store, 2, {{2, &b}});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->new_chunks, 5u);  // 20000 bytes in 4096-byte chunks
  EXPECT_EQ(ReadFloats(**store, 2, 2), b);
  auto verify = (*store)->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok());
  auto stats = (*store)->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->pack_garbage_bytes, 0u);
}

// Power loss: the pack bytes of a capture that never committed were never
// synced and are gone; every committed snapshot's bytes were synced before
// its commit and survive.
TEST(PackPowerLossTest, UnsyncedPackBytesAreDroppedCommittedOnesSurvive) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  auto fault = std::make_shared<FaultInjectionFS>();
  auto env = NewFaultInjectionEnv(fault);
  auto a = NormalFloats(3000, 3);
  auto b = NormalFloats(2000, 4);
  auto c = NormalFloats(4000, 5);
  {
    auto store = internal::RocksStore::OpenWritable(path, RawChunks(/*sync=*/true), env.get());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &a}}).ok());
    ASSERT_TRUE(WriteSnapshot(**store, 2, {{1, &a}, {2, &b}}).ok());
    auto abandoned = (*store)->BeginSnapshot(3);
    ASSERT_TRUE(abandoned.ok());
    ASSERT_TRUE((*abandoned)->AddTensor(View(3, "param", c)).ok());
  }
  EXPECT_EQ(fs::file_size(Pack(path, 1)), RawPackBytes(3000) + RawPackBytes(2000) - 8 + RawPackBytes(4000) - 8);
  ASSERT_TRUE(fault->DropUnsyncedData().ok());
  EXPECT_EQ(fs::file_size(Pack(path, 1)), RawPackBytes(3000) + RawPackBytes(2000) - 8);
  auto store = internal::RocksStore::OpenWritable(path, RawChunks(true), env.get());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(ReadFloats(**store, 1, 1), a);
  EXPECT_EQ(ReadFloats(**store, 2, 2), b);
  auto verify = (*store)->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok());
}

// A failed pack sync fails the commit (typed, nothing visible); the failed
// pack takes no more chunks and the same capture then commits.
TEST(PackIoFaultTest, FailedPackSyncOrAppendFailsTheCaptureAndTheNextOneCommits) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  auto fault = std::make_shared<FaultInjectionFS>();
  auto env = NewFaultInjectionEnv(fault);
  auto a = NormalFloats(3000, 6);
  auto store = internal::RocksStore::OpenWritable(path, RawChunks(/*sync=*/true), env.get());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  {
    auto writer = (*store)->BeginSnapshot(1);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->AddTensor(View(1, "param", a)).ok());
    fault->FailNth(FsOp::kSync, 1, /*persistent=*/false, /*no_space=*/false);
    auto committed = (*writer)->Commit();
    ASSERT_FALSE(committed.ok());
    EXPECT_EQ(committed.status().code(), StatusCode::kIOError) << committed.status().ToString();
    EXPECT_NE(committed.status().message().find("sync pack files"), std::string::npos)
        << committed.status().ToString();
  }
  EXPECT_EQ((*store)->Info(1).status().code(), StatusCode::kNotFound);
  {
    auto writer = (*store)->BeginSnapshot(1);
    ASSERT_TRUE(writer.ok());
    fault->FailNth(FsOp::kAppend, 1, /*persistent=*/false, /*no_space=*/true);
    Status added = (*writer)->AddTensor(View(1, "param", a));
    EXPECT_EQ(added.code(), StatusCode::kNoSpace) << added.ToString();
    EXPECT_EQ((*writer)->Commit().status().code(), StatusCode::kAborted);
  }
  EXPECT_EQ((*store)->Info(1).status().code(), StatusCode::kNotFound);
  auto info = WriteSnapshot(**store, 1, {{1, &a}});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->new_chunks, 3u);  // nothing of the failed captures was reused
  EXPECT_EQ(ReadFloats(**store, 1, 1), a);
  auto verify = (*store)->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok());
}

// A read fault on a pack file is an IOError of the read; a bit flip in a
// raw chunk's bytes is a hash mismatch; a truncated pack is Corruption for
// reads and Verify. Never a silent wrong answer.
TEST(PackCorruptionTest, ReadFaultsFlipsAndTruncationsAreDetected) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  auto fault = std::make_shared<FaultInjectionFS>();
  auto env = NewFaultInjectionEnv(fault);
  auto a = NormalFloats(3000, 7);
  {
    auto store = internal::RocksStore::OpenWritable(path, RawChunks(), env.get());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &a}}).ok());
  }
  auto store = internal::RocksStore::OpenReadOnlyInstance(path, env.get());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto record = (*store)->Tensor(1, 1, "param");
  ASSERT_TRUE(record.ok());
  std::vector<float> out(a.size());
  fault->FlipBitOnRead(".pack", 1, /*persistent=*/false);
  Status s = (*store)->ReadTensor(*record, out.data(), a.size() * 4);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("hash mismatch"), std::string::npos) << s.ToString();
  EXPECT_EQ(fault->reads_corrupted(), 1u);
  fault->FailNth(FsOp::kRead, 1, /*persistent=*/true, /*no_space=*/false);
  s = (*store)->ReadTensor(*record, out.data(), a.size() * 4);
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  fault->ClearFaults();
  ASSERT_TRUE((*store)->ReadTensor(*record, out.data(), a.size() * 4).ok());
  EXPECT_EQ(out, a);
  store->reset();

  fs::resize_file(Pack(path, 1), fs::file_size(Pack(path, 1)) - 100);
  auto damaged = Store::OpenReadOnly(path);
  ASSERT_TRUE(damaged.ok()) << damaged.status().ToString();
  s = (*damaged)->ReadTensor(*record, out.data(), a.size() * 4);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("the file is shorter than the index says"), std::string::npos) << s.ToString();
  auto verify = (*damaged)->Verify();
  ASSERT_TRUE(verify.ok());
  ASSERT_FALSE(verify->ok());
  bool named = false;
  for (const VerifyProblem& p : verify->problems) {
    named = named || (p.store && p.file == "packs/pack-00000001.pack" &&
                      p.status.message().find("the chunk index places chunks up to byte") != std::string::npos);
  }
  EXPECT_TRUE(named);
}

std::string ChildPath() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  self[n] = '\0';
  return (fs::path(self).parent_path() / "trainsnap_pack_gc_child").string();
}

// Runs the child on `store` with `kill_point` armed; its wait status.
int RunGcChild(const std::string& store, const std::string& kill_point) {
  const std::string exe = ChildPath();
  const std::string arm = "TRAINSNAP_KILL_POINT=" + kill_point;
  const pid_t pid = ::fork();
  if (pid == 0) {
    char* argv[] = {const_cast<char*>(exe.c_str()), const_cast<char*>(store.c_str()), nullptr};
    char* envp[] = {const_cast<char*>(arm.c_str()), nullptr};
    ::execve(argv[0], argv, envp);
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// Compaction killed at each of its steps loses nothing live: the reopened
// store holds every snapshot bitwise, verifies clean, and the next
// collection finishes the compaction.
TEST(PackCompactionKillTest, KilledAtEveryStepLosesNothingLive) {
  ASSERT_TRUE(internal::KillPointsCompiled());
  TempDir dir;
  const std::string base = dir.Sub("base");
  auto shared = NormalFloats(4096, 8);  // 4 chunks every snapshot references
  std::vector<std::vector<float>> own;
  for (int i = 0; i < 6; ++i) own.push_back(NormalFloats(4096, 10 + i));
  uint64_t live_after = 0;
  {
    auto store = Store::Open(base, RawChunks(/*sync=*/true));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(WriteSnapshot(**store, i + 1, {{1, &shared}, {2, &own[i]}}).ok());
    // Steps 1..4 go: their own chunks (16 of 28) become garbage.
    for (int64_t step = 1; step <= 4; ++step) ASSERT_TRUE((*store)->Delete(step).ok());
    auto stats = (*store)->Stats();
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->packs, 1u);
    live_after = stats->chunk_stored_bytes - stats->collectable_bytes;
  }
  const uint64_t pack_before = fs::file_size(Pack(base, 1));
  struct Case {
    const char* kill_point;
    uint32_t pack_left;  // the one pack file after the reopen's recovery
  };
  for (const Case& c : {Case{internal::kKillCompactCopied, 1}, Case{internal::kKillCompactSynced, 1},
                        Case{internal::kKillCompactIndexed, 2}}) {
    SCOPED_TRACE(c.kill_point);
    const std::string path = dir.Sub(std::string("copy-") + c.kill_point);
    fs::copy(base, path, fs::copy_options::recursive);
    const int status = RunGcChild(path, c.kill_point);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child wait status " << status;
    ASSERT_TRUE(fs::exists(Pack(path, 2)));  // the copies were written
    auto store = Store::Open(path, RawChunks(true));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    // Before the index moved, the copies are unreferenced (pack 2 deleted);
    // after, the old pack is (pack 1 deleted).
    EXPECT_EQ(fs::exists(Pack(path, 1)), c.pack_left == 1);
    EXPECT_EQ(fs::exists(Pack(path, 2)), c.pack_left == 2);
    if (c.pack_left == 1) {
      EXPECT_EQ(fs::file_size(Pack(path, 1)), pack_before);
    } else {
      EXPECT_EQ(fs::file_size(Pack(path, 2)), 8 + live_after);
    }
    for (int64_t step = 5; step <= 6; ++step) {
      EXPECT_EQ(ReadFloats(**store, step, 1), shared);
      EXPECT_EQ(ReadFloats(**store, step, 2), own[step - 1]);
    }
    auto verify = (*store)->Verify();
    ASSERT_TRUE(verify.ok());
    EXPECT_TRUE(verify->ok());
    auto gc = (*store)->CollectGarbage();
    ASSERT_TRUE(gc.ok()) << gc.status().ToString();
    auto stats = (*store)->Stats();
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->collectable_chunks, 0u);
    EXPECT_EQ(stats->pack_garbage_bytes, 0u);
    EXPECT_EQ(stats->pack_bytes, 8 + live_after);
    EXPECT_EQ(ReadFloats(**store, 6, 2), own[5]);
  }
  // Uninterrupted, for the write amplification: the live 12 of 28 chunks
  // are copied once.
  auto store = Store::Open(base, RawChunks(true));
  ASSERT_TRUE(store.ok());
  auto gc = (*store)->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->chunks_deleted, 16u);
  EXPECT_EQ(gc->packs_removed, 1u);
  EXPECT_EQ(gc->pack_bytes_rewritten, live_after);
  EXPECT_EQ(gc->pack_bytes_freed, pack_before - live_after);
  std::printf("[ compaction ] %llu live bytes rewritten to free %llu (write amplification %.2f)\n",
              static_cast<unsigned long long>(gc->pack_bytes_rewritten),
              static_cast<unsigned long long>(gc->pack_bytes_freed),
              static_cast<double>(gc->pack_bytes_rewritten) / static_cast<double>(gc->pack_bytes_freed));
}

// --- in-flight chunks (ChunkRegistry) -----------------------------------------

// The header of the encoding the index holds for chunk `hash`.
internal::ChunkHeader IndexedHeader(const std::string& path, const ChunkHash& hash) {
  RawDb raw(path);
  EXPECT_TRUE(raw.ok()) << raw.error();
  std::string value;
  EXPECT_TRUE(raw.GetChunk(hash, &value).ok());
  auto header = internal::ParseChunkHeader(value);
  EXPECT_TRUE(header.ok()) << header.status().ToString();
  return header.ok() ? *header : internal::ChunkHeader();
}

// Two captures in flight write the same bytes with different delta bases
// (a commit between them moved the tensor's bases; e.g. LoRA B unchanged
// over micro-steps with the async pipeline). The second reuses the first's
// encoding: the bytes are written once, whichever commit comes first indexes
// the encoding the other expects, and a later delta against that chunk
// records the chain depth it really has. (Before in-flight chunks, each
// wrote its own copy, the later commit's index entry replaced the earlier
// one, and deltas written in between named a wrong base depth.)
TEST(InFlightChunkTest, TwoWritersOfTheSameBytesShareOneEncoding) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const StoreOptions o = DeltaOptions(4);  // one chunk per tensor
  const std::vector<float> v0 = NormalFloats(4096, 1);
  const std::vector<float> v1 = Evolve(v0, 1, 11), v2 = Evolve(v1, 1, 12), v3 = Evolve(v2, 1, 13);
  SnapshotInfo info3, info4, info5;
  {
    auto store = Store::Open(path, o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &v0}}).ok());  // keyframe v0
    auto w3 = (*store)->BeginSnapshot(3);
    ASSERT_TRUE(w3.ok());
    ASSERT_TRUE((*w3)->AddTensor(View(1, "param", v2)).ok());  // v2 against v0: depth 1
    ASSERT_TRUE(WriteSnapshot(**store, 2, {{1, &v1}}).ok());    // the bases are now v1 (depth 1)
    auto w4 = (*store)->BeginSnapshot(4);
    ASSERT_TRUE(w4.ok());
    ASSERT_TRUE((*w4)->AddTensor(View(1, "param", v2)).ok());  // alone: v2 against v1, depth 2
    (*w4)->SetManifest("m");
    auto c4 = (*w4)->Commit();
    ASSERT_TRUE(c4.ok()) << c4.status().ToString();
    info4 = *c4;
    auto c5 = WriteSnapshot(**store, 5, {{1, &v3}});  // v3 against v2
    ASSERT_TRUE(c5.ok()) << c5.status().ToString();
    info5 = *c5;
    (*w3)->SetManifest("m");
    auto c3 = (*w3)->Commit();
    ASSERT_TRUE(c3.ok()) << c3.status().ToString();
    info3 = *c3;

    EXPECT_EQ(info3.new_chunks, 1u);  // wrote v2
    EXPECT_EQ(info4.new_chunks, 0u);  // reused step 3's v2
    EXPECT_EQ(info4.new_bytes, 0u);
    EXPECT_EQ(info5.new_chunks, 1u);
    auto stats = (*store)->Stats();
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->chunks, 4u);
    EXPECT_EQ(stats->pack_garbage_bytes, 0u);  // no second copy of v2
    const std::vector<std::vector<float>> expected = {v0, v1, v2, v2, v3};
    for (int s = 1; s <= 5; ++s) EXPECT_EQ(ReadFloats(**store, s, 1), expected[s - 1]) << "step " << s;
    auto verify = (*store)->Verify();
    ASSERT_TRUE(verify.ok());
    EXPECT_TRUE(verify->ok());
  }
  auto hash_of = [&](int64_t step) {
    auto store = Store::OpenReadOnly(path);
    EXPECT_TRUE(store.ok());
    auto record = (*store)->Tensor(step, 1, "param");
    EXPECT_TRUE(record.ok());
    return record.ok() ? record->chunks[0].hash : ChunkHash();
  };
  const ChunkHash h0 = hash_of(1), h2 = hash_of(3), h3 = hash_of(5);
  EXPECT_EQ(hash_of(4), h2);
  const internal::ChunkHeader v2_header = IndexedHeader(path, h2);
  ASSERT_EQ(v2_header.filter, internal::ChunkFilter::kXorDelta);
  EXPECT_EQ(v2_header.delta_depth, 1);  // step 3's encoding, against v0
  EXPECT_EQ(v2_header.base, h0);
  const internal::ChunkHeader v3_header = IndexedHeader(path, h3);
  ASSERT_EQ(v3_header.filter, internal::ChunkFilter::kXorDelta);
  EXPECT_EQ(v3_header.base, h2);
  EXPECT_EQ(v3_header.delta_depth, 2);  // one more than its base's real depth
}

// The delta base of a reused in-flight chunk stays while the reusing writer
// lives, even when the appender is gone and the base's snapshot is deleted
// and collected before the commit.
TEST(InFlightChunkTest, AReusedDeltasBaseOutlivesItsAppenderAndItsSnapshot) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const StoreOptions o = DeltaOptions(4);
  const std::vector<float> v0 = NormalFloats(4096, 1);
  const std::vector<float> v1 = Evolve(v0, 1, 11);
  auto store = Store::Open(path, o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &v0}}).ok());
  auto w2 = (*store)->BeginSnapshot(2);
  ASSERT_TRUE(w2.ok());
  ASSERT_TRUE((*w2)->AddTensor(View(1, "param", v1)).ok());  // v1 against v0
  auto w3 = (*store)->BeginSnapshot(3);
  ASSERT_TRUE(w3.ok());
  ASSERT_TRUE((*w3)->AddTensor(View(1, "param", v1)).ok());  // reuses step 2's delta
  w2->reset();
  ASSERT_TRUE((*store)->Delete(1).ok());
  auto gc = (*store)->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->chunks_deleted, 0u);  // v0 is step 3's delta base
  (*w3)->SetManifest("m");
  auto committed = (*w3)->Commit();
  ASSERT_TRUE(committed.ok()) << committed.status().ToString();
  EXPECT_EQ(ReadFloats(**store, 3, 1), v1);
  ASSERT_TRUE((*store)->CollectGarbage().ok());
  EXPECT_EQ(ReadFloats(**store, 3, 1), v1);
  auto verify = (*store)->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok());
}

// A writer that reuses another's in-flight chunk can commit it after that
// writer is gone, even when compaction ran in between: the chunk's pack,
// below the second writer's own floor, stays while a writer holds the chunk.
TEST(InFlightChunkTest, AnAbandonedWritersChunkStaysCommittableThroughCompaction) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const std::vector<float> a = NormalFloats(3000, 1), b = NormalFloats(5000, 2);
  auto store = Store::Open(path, RawChunks());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE(WriteSnapshot(**store, 1, {{1, &a}}).ok());
  auto w2 = (*store)->BeginSnapshot(2);
  ASSERT_TRUE(w2.ok());
  ASSERT_TRUE((*w2)->AddTensor(View(2, "param", b)).ok());  // b's chunks appended to pack 1
  ASSERT_TRUE((*store)->CollectGarbage().ok());           // the next captures append to pack 2
  auto w3 = (*store)->BeginSnapshot(3);
  ASSERT_TRUE(w3.ok());
  ASSERT_TRUE((*w3)->AddTensor(View(2, "param", b)).ok());  // reuses step 2's chunks in pack 1
  w2->reset();                                              // step 2 abandoned
  auto gc = (*store)->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->pack_bytes_freed, 0u);  // pack 1's uncommitted tail is step 3's now
  EXPECT_EQ(fs::file_size(Pack(path, 1)), RawPackBytes(3000) + RawPackBytes(5000) - 8);
  (*w3)->SetManifest("m");
  auto committed = (*w3)->Commit();
  ASSERT_TRUE(committed.ok()) << committed.status().ToString();
  EXPECT_EQ(committed->new_chunks, 0u);  // step 2's writer appended them
  EXPECT_EQ(ReadFloats(**store, 3, 2), b);
  ASSERT_TRUE((*store)->CollectGarbage().ok());
  EXPECT_EQ(ReadFloats(**store, 1, 1), a);
  EXPECT_EQ(ReadFloats(**store, 3, 2), b);
  auto verify = (*store)->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok());
}

}  // namespace
}  // namespace trainsnap::testing
