// Disk full: a byte budget in the fault-injecting file system (swept), and a
// real small tmpfs where the environment lets the test mount one. The capture
// fails with NoSpace, earlier snapshots stay readable, and the store works
// again once space is freed.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "reliability/reliability_util.h"
#include "store/rocks_store.h"
#include "store/temp_dir.h"
#include "testing/fault_injection_fs.h"

namespace trainsnap::testing {
namespace {

// Budget step of the sweep, in bytes: a capture of one test step appends
// about 11 KB, so the sweep visits every stage of it.
constexpr uint64_t kBudgetStep = 1024;
constexpr uint64_t kMaxBudget = 1 << 20;

TEST(DiskFullTest, ByteBudgetSweepGivesNoSpaceAndRecovers) {
  TempDir dir;
  const std::string base = dir.Sub("base");
  {
    auto store = Store::Open(base, TestStoreOptions());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE(WriteStep(**store, 1).ok());
    ASSERT_TRUE(WriteStep(**store, 2).ok());
  }
  uint64_t budgets = 0, no_space = 0;
  uint64_t budget = 0;
  for (; budget <= kMaxBudget; budget += kBudgetStep) {
    SCOPED_TRACE("byte budget " + std::to_string(budget));
    const std::string path = dir.Sub("s" + std::to_string(budget));
    CopyDir(base, path);
    auto fs = std::make_shared<FaultInjectionFS>();
    auto env = NewFaultInjectionEnv(fs);
    bool step3_failed = false;
    {
      auto store = internal::RocksStore::OpenWritable(path, TestStoreOptions(), env.get());
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      fs->SetByteBudget(budget);
      Status s = WriteStep(**store, 3);
      if (s.ok() && fs->faults_injected() == 0) break;  // the budget suffices: sweep done
      ++budgets;
      if (!s.ok()) {
        step3_failed = true;
        ++no_space;
        EXPECT_EQ(s.code(), StatusCode::kNoSpace) << s.ToString();
        // Still full: reads work, and another capture fails the same way.
        EXPECT_TRUE(StoreHoldsExactly(**store, {1, 2}));
        Status again = WriteStep(**store, 5);
        EXPECT_EQ(again.code(), StatusCode::kNoSpace) << again.ToString();
      }
      // Space freed: the same open store captures again.
      fs->ClearFaults();
      EXPECT_TRUE(StoreHoldsExactly(**store, step3_failed ? std::vector<int64_t>{1, 2}
                                                          : std::vector<int64_t>{1, 2, 3}));
      Status after = WriteStep(**store, 4);
      EXPECT_TRUE(after.ok()) << "capture after space was freed: " << after.ToString();
    }
    {
      auto store = Store::Open(path, TestStoreOptions());
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      auto list = (*store)->List();
      ASSERT_TRUE(list.ok());
      bool has3 = false;
      for (const SnapshotInfo& info : *list) has3 |= info.step == 3;
      EXPECT_TRUE(StoreHoldsExactly(**store, has3 ? std::vector<int64_t>{1, 2, 3, 4} : std::vector<int64_t>{1, 2, 4}));
    }
    std::filesystem::remove_all(path);
    if (HasFailure()) break;
  }
  EXPECT_LT(budget, kMaxBudget) << "no budget was large enough";
  EXPECT_GT(no_space, 0u);
  std::printf("[ disk-full ] %llu byte budgets swept (step %llu B), %llu NoSpace failures, capture fits from %llu B\n",
              (unsigned long long)budgets, (unsigned long long)kBudgetStep, (unsigned long long)no_space,
              (unsigned long long)budget);
}

// A real full file system. Needs the privilege to mount a tmpfs (root in a
// container that allows it); elsewhere the test says so and skips.
TEST(DiskFullTest, RealTmpfsFillsUpThenRecoversAfterGrowing) {
  TempDir dir;
  const std::string mnt = dir.Sub("tmpfs");
  std::filesystem::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=2m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                 << "); the byte-budget test above covers disk full";
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};
  const std::string path = mnt + "/s";
  // 256 KiB of incompressible bytes per step: the 2 MiB file system fills
  // after a few steps.
  auto big = [](int64_t step) {
    std::vector<uint8_t> bytes = StepTensors(step)[0].bytes;
    std::vector<uint8_t> out;
    for (int i = 0; out.size() < (256u << 10); ++i) {
      for (uint8_t b : bytes) out.push_back(static_cast<uint8_t>(b ^ (i * 131 + 7)));
    }
    out.resize(256u << 10);
    return out;
  };
  auto write = [&](Store& store, int64_t step) -> Status {
    TRAINSNAP_ASSIGN_OR_RETURN(auto writer, store.BeginSnapshot(step));
    const std::vector<uint8_t> bytes = big(step);
    TensorView v{1, "param", DType::kUInt8, {static_cast<int64_t>(bytes.size())}, bytes.data(), bytes.size()};
    TRAINSNAP_RETURN_IF_ERROR(writer->AddTensor(v));
    auto info = writer->Commit();
    return info.ok() ? Status::OK() : info.status();
  };
  auto intact = [&](Store& store, int64_t step) {
    auto r = store.Tensor(step, 1, "param");
    if (!r.ok()) return false;
    std::vector<uint8_t> got(r->bytes);
    return store.ReadTensor(*r, got.data(), got.size()).ok() && got == big(step);
  };
  auto store = Store::Open(path, TestStoreOptions());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  int64_t step = 1;
  Status s;
  for (; step <= 64; ++step) {
    s = write(**store, step);
    if (!s.ok()) break;
  }
  ASSERT_FALSE(s.ok()) << "2 MiB never filled up";
  EXPECT_EQ(s.code(), StatusCode::kNoSpace) << s.ToString();
  const int64_t failed = step;
  auto list = (*store)->List();
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), static_cast<size_t>(failed - 1));
  for (int64_t k = 1; k < failed; ++k) EXPECT_TRUE(intact(**store, k)) << "step " << k;
  // Free space by growing the file system; the next capture succeeds.
  ASSERT_EQ(::mount("tmpfs", mnt.c_str(), "tmpfs", MS_REMOUNT, "size=64m"), 0) << std::strerror(errno);
  Status after = write(**store, failed);
  EXPECT_TRUE(after.ok()) << after.ToString();
  store->reset();
  auto reopened = Store::Open(path, TestStoreOptions());
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  auto all = (*reopened)->List();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), static_cast<size_t>(failed));
  for (int64_t k = 1; k <= failed; ++k) EXPECT_TRUE(intact(**reopened, k)) << "step " << k;
  std::printf("[ disk-full ] tmpfs of 2 MiB: NoSpace at step %lld, recovered after growing it\n", (long long)failed);
}

}  // namespace
}  // namespace trainsnap::testing
