// Concurrency: one writer process per store (a second one gets Busy), and
// read-only openers see only complete snapshots while the writer commits,
// deletes and compacts packs: each snapshot they list reads whole or, once
// deleted since, NotFound, never as damage. Processes are forked before any
// database is opened here.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "reliability/reliability_util.h"
#include "testing/temp_dir.h"

namespace trainsnap::testing {
namespace {

constexpr int64_t kWriterSteps = 40;

TEST(ConcurrencyTest, SecondWriterProcessGetsBusy) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  int ready[2], done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The writer: holds the store until the parent is done with its checks.
    auto store = Store::Open(path, TestStoreOptions());
    const char ok = store.ok() && WriteStep(**store, 1).ok() ? 'y' : 'n';
    if (::write(ready[1], &ok, 1) != 1) ::_exit(2);
    char c;
    if (::read(done[0], &c, 1) != 1) ::_exit(3);
    ::_exit(0);
  }
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, 'y');
  auto second = Store::Open(path, TestStoreOptions());
  EXPECT_EQ(second.status().code(), StatusCode::kBusy) << second.status().ToString();
  // Readers are welcome meanwhile.
  {
    auto reader = Store::OpenReadOnly(path);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_TRUE(StoreHoldsExactly(**reader, {1}));
    EXPECT_EQ(WriteStep(**reader, 2).code(), StatusCode::kNotSupported);
  }
  ASSERT_EQ(::write(done[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // The writer is gone: the store is free again.
  auto again = Store::Open(path, TestStoreOptions());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(StoreHoldsExactly(**again, {1}));
}

TEST(ConcurrencyTest, ReadersDuringWritesSeeOnlyCompleteSnapshots) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  int created[2];
  ASSERT_EQ(::pipe(created), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The writer process: commits steps 1..kWriterSteps, deleting now and then.
    auto store = Store::Open(path, TestStoreOptions());
    if (!store.ok() || !WriteStep(**store, 1).ok()) ::_exit(2);
    if (::write(created[1], "x", 1) != 1) ::_exit(3);
    for (int64_t step = 2; step <= kWriterSteps; ++step) {
      if (!WriteStep(**store, step).ok()) ::_exit(4);
      if (step % 10 == 0 && !(*store)->Delete(step - 5).ok()) ::_exit(5);
    }
    if (!(*store)->CollectGarbage().ok()) ::_exit(6);
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(created[0], &c, 1), 1);
  // Two reader threads refresh and check everything they see while the writer runs.
  std::atomic<bool> writer_done{false};
  std::atomic<int> checks{0}, failures{0};
  std::vector<std::string> errors(2);
  auto reader = [&](int id) {
    auto store = Store::OpenReadOnly(path);
    if (!store.ok()) {
      errors[id] = store.status().ToString();
      ++failures;
      return;
    }
    bool last_round = false;
    while (!last_round) {
      last_round = writer_done.load();
      Status r = (*store)->Refresh();
      if (!r.ok()) {
        errors[id] = "refresh: " + r.ToString();
        ++failures;
        return;
      }
      auto list = (*store)->List();
      if (!list.ok()) {
        errors[id] = list.status().ToString();
        ++failures;
        return;
      }
      for (const SnapshotInfo& info : *list) {
        auto ok = StepIsIntact(**store, info.step);
        // A snapshot the writer deleted (or GC'd) since our Refresh may go
        // NotFound under us; anything else visible must be whole.
        if (!ok && (*store)->Info(info.step).status().code() != StatusCode::kNotFound) {
          auto again = StepIsIntact(**store, info.step);
          if (!again) {
            errors[id] = again.message();
            ++failures;
            return;
          }
        }
        ++checks;
      }
    }
  };
  std::thread r0(reader, 0), r1(reader, 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  writer_done = true;
  r0.join();
  r1.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer status " << status;
  EXPECT_EQ(failures.load(), 0) << errors[0] << " | " << errors[1];
  EXPECT_GT(checks.load(), 0);
  // After the writer: exactly the expected snapshots.
  std::vector<int64_t> expected;
  for (int64_t s = 1; s <= kWriterSteps; ++s) {
    if (!(s % 10 == 5 && s + 5 <= kWriterSteps)) expected.push_back(s);
  }
  auto store = Store::Open(path, TestStoreOptions());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE(StoreHoldsExactly(**store, expected));
}

// Everything a reader reads of `step` (manifest, records, every tensor's
// bytes), compared with what the writer wrote: OK, or the first error (a
// wrong byte is Corruption).
Status ReadStep(Store& store, int64_t step) {
  auto intact = StepIsIntact(store, step);
  if (intact) return Status::OK();
  const std::string message = intact.message();
  if (message.find("NotFound") != std::string::npos) return Status::NotFound(message);
  return Status::Corruption(message);
}

// Readers beside a writer that captures, deletes old steps and collects
// garbage every third step, which removes and rewrites packs: each reader
// round opens the store read-only (as `trainsnap verify` or `export` does),
// lists it, waits a while (the writer moves on: packs the view names are
// compacted away, snapshots it lists are deleted), then reads every listed
// snapshot, or verifies them all. Each reads whole or NotFound (deleted
// since), and Verify reports no problem. Before, a chunk moved by compaction
// read as "pack file ... is missing" (Corruption) in snapshots that were
// live, and a deleted snapshot's as Corruption.
TEST(ConcurrencyTest, ReadersDuringCompactionSeeEachSnapshotWholeOrNotFound) {
  constexpr int64_t kRounds = 150;
  TempDir dir;
  const std::string path = dir.Sub("s");
  int created[2];
  ASSERT_EQ(::pipe(created), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto store = Store::Open(path, TestStoreOptions(/*sync=*/false));
    if (!store.ok()) ::_exit(2);
    for (int64_t step = 1; step <= 3; ++step) {
      if (!WriteStep(**store, step).ok()) ::_exit(3);
    }
    if (::write(created[1], "x", 1) != 1) ::_exit(4);
    for (int64_t step = 4; step <= kRounds; ++step) {
      if (!WriteStep(**store, step).ok()) ::_exit(5);
      if (!(*store)->Delete(step - 3).ok()) ::_exit(6);
      if (step % 3 == 0) {
        auto gc = (*store)->CollectGarbage();
        if (!gc.ok() || gc->chunks_deleted == 0) ::_exit(7);
      }
      ::usleep(10000);
    }
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(created[0], &c, 1), 1);
  std::atomic<bool> writer_done{false};
  std::atomic<int> whole{0}, gone{0}, false_reports{0}, verified{0}, deleted_meanwhile{0};
  constexpr int kReaders = 3;
  std::vector<std::string> errors(kReaders);
  auto reader = [&](int id) {
    std::mt19937 rng(id);
    bool last_round = false;
    for (int round = 0; !last_round; ++round) {
      last_round = writer_done.load();
      auto store = Store::OpenReadOnly(path);
      if (!store.ok()) {
        errors[id] = store.status().ToString();
        ++false_reports;
        return;
      }
      auto list = (*store)->List();
      if (!list.ok()) {
        errors[id] = list.status().ToString();
        ++false_reports;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 150));
      if (id == 0 && round % 2 == 0) {
        auto verify = (*store)->Verify();
        if (!verify.ok()) {
          errors[id] = "verify: " + verify.status().ToString();
          ++false_reports;
        } else if (!verify->ok()) {
          errors[id] = "verify: " + verify->problems.front().status.ToString();
          ++false_reports;
        } else {
          ++verified;
          deleted_meanwhile += static_cast<int>(verify->deleted_meanwhile.size());
        }
        continue;
      }
      for (const SnapshotInfo& info : *list) {
        Status s = ReadStep(**store, info.step);
        if (s.ok()) {
          ++whole;
        } else if (s.code() == StatusCode::kNotFound) {
          ++gone;
        } else {
          errors[id] = s.ToString();
          ++false_reports;
        }
      }
    }
  };
  std::vector<std::thread> readers;
  for (int i = 0; i < kReaders; ++i) readers.emplace_back(reader, i);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  writer_done = true;
  for (std::thread& t : readers) t.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer status " << status;
  std::string all_errors;
  for (const std::string& e : errors) all_errors += e.empty() ? "" : e + " | ";
  EXPECT_EQ(false_reports.load(), 0) << all_errors;
  EXPECT_GT(whole.load(), 0);
  EXPECT_GT(verified.load(), 0);
  std::printf(
      "[ readers ] whole %d, gone (deleted since) %d, verifies %d "
      "(snapshots deleted meanwhile %d), false "
      "reports %d\n",
      whole.load(), gone.load(), verified.load(), deleted_meanwhile.load(), false_reports.load());
  // After the writer: the last three steps, whole.
  auto store = Store::Open(path, TestStoreOptions());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE(StoreHoldsExactly(**store, {kRounds - 2, kRounds - 1, kRounds}));
}

}  // namespace
}  // namespace trainsnap::testing
