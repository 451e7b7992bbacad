// I/O-fault sweep: for every kind of file-system operation, fail its N-th
// occurrence (N = 1, 2, ... until a capture meets no fault) during "open the
// store, capture one snapshot", once (one-shot) and for good (persistent).
// Every failure must be a typed IOError/NoSpace, leave nothing partial
// visible, keep older snapshots bit-exact, and the store must work again once
// the fault clears (RocksDB's Resume() underneath). Each fault point runs in
// its own process, so that one that crashes fails the test with its name.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>

#include "reliability/reliability_util.h"
#include "store/rocks_store.h"
#include "testing/temp_dir.h"
#include "testing/fault_injection_fs.h"

namespace trainsnap::testing {
namespace {

struct SweepCase {
  FsOp op;
  bool persistent;
  bool no_space;
};

std::string CaseName(const ::testing::TestParamInfo<SweepCase>& info) {
  return std::string(FsOpName(info.param.op)) + (info.param.persistent ? "_persistent" : "_oneshot") +
         (info.param.no_space ? "_nospace" : "_ioerror");
}

// Far more operations than one open + capture performs: reaching it means
// the sweep never terminated.
constexpr uint64_t kMaxFaultPoint = 1000;

#define SWEEP_CHECK(cond, msg)                                        \
  do {                                                                \
    if (!(cond)) {                                                    \
      std::ostringstream sweep_os;                                    \
      sweep_os << "fail " << msg;                                     \
      return sweep_os.str();                                          \
    }                                                                 \
  } while (0)

#define SWEEP_CHECK_RESULT(assertion)                              \
  do {                                                             \
    ::testing::AssertionResult sweep_r = (assertion);              \
    if (!sweep_r) return std::string("fail ") + sweep_r.message(); \
  } while (0)

// One fault point, run in a child process. Returns "done" when the capture
// met no fault (the sweep is complete), "ok <outcome>" when every check
// passed, "fail <why>" otherwise.
std::string RunFaultPoint(const SweepCase& c, uint64_t n, const std::string& path) {
  const StatusCode expected_code = c.no_space ? StatusCode::kNoSpace : StatusCode::kIOError;
  auto fs = std::make_shared<FaultInjectionFS>();
  auto env = NewFaultInjectionEnv(fs);
  fs->FailNth(c.op, n, c.persistent, c.no_space);
  std::string outcome;
  bool step3_failed = false;
  bool seen3 = false;  // step 3 visible on the faulted store after the fault cleared
  {
    auto store = internal::RocksStore::OpenWritable(path, TestStoreOptions(), env.get());
    if (!store.ok()) {
      SWEEP_CHECK(fs->faults_injected() >= 1, "open failed without a fault: " << store.status().ToString());
      SWEEP_CHECK(store.status().code() == expected_code, "open: wrong code: " << store.status().ToString());
      outcome = "open_failed";
      step3_failed = true;
    } else {
      Status s = WriteStep(**store, 3);
      if (s.ok() && fs->faults_injected() == 0) return "done";
      if (s.ok()) {
        outcome = "absorbed";  // the fault hit work that was retried or not needed
      } else {
        SWEEP_CHECK(s.code() == expected_code, "capture: wrong code: " << s.ToString());
        outcome = "capture_failed";
        step3_failed = true;
      }
      fs->ClearFaults();
      // Nothing partial: the others are intact, and the failed step is
      // invisible, or, when its commit reached the WAL before the error was
      // reported and a recovery already replayed it, present and intact.
      auto list = (*store)->List();
      SWEEP_CHECK(list.ok(), "List after the fault cleared: " << list.status().ToString());
      for (const SnapshotInfo& info : *list) seen3 |= info.step == 3;
      SWEEP_CHECK_RESULT(StoreHoldsExactly(**store, step3_failed && !seen3 ? std::vector<int64_t>{1, 2}
                                                                            : std::vector<int64_t>{1, 2, 3}));
      // The fault cleared: the same open store captures again.
      Status again = WriteStep(**store, 4);
      SWEEP_CHECK(again.ok(), "capture on the same store after the fault cleared: " << again.ToString());
    }
  }
  fs->ClearFaults();
  if (outcome == "open_failed") {
    // The fault cleared: the store opens, holds exactly the older snapshots
    // and captures again.
    auto store = internal::RocksStore::OpenWritable(path, TestStoreOptions(), env.get());
    SWEEP_CHECK(store.ok(), "reopen after the fault cleared: " << store.status().ToString());
    SWEEP_CHECK_RESULT(StoreHoldsExactly(**store, {1, 2}));
    Status again = WriteStep(**store, 4);
    SWEEP_CHECK(again.ok(), "capture after reopening: " << again.ToString());
  }
  // Plain file system: steps 1, 2 and 4 are intact; step 3 is atomic: absent
  // with no tensor record, or (its commit reached the WAL before the error
  // was reported) present and intact.
  bool has3 = false;
  {
    auto store = Store::Open(path, TestStoreOptions());
    SWEEP_CHECK(store.ok(), "plain reopen: " << store.status().ToString());
    auto list = (*store)->List();
    SWEEP_CHECK(list.ok(), list.status().ToString());
    for (const SnapshotInfo& info : *list) has3 |= info.step == 3;
    SWEEP_CHECK(has3 || !seen3, "step 3 was visible after the fault cleared, and gone after reopening");
    SWEEP_CHECK_RESULT(
        StoreHoldsExactly(**store, has3 ? std::vector<int64_t>{1, 2, 3, 4} : std::vector<int64_t>{1, 2, 4}));
    auto verify = (*store)->Verify();
    SWEEP_CHECK(verify.ok(), verify.status().ToString());
    SWEEP_CHECK(verify->ok(), "Verify reports " << verify->problems.size() << " problems");
  }
  const size_t records3 = CountTensorRecords(path, 3);
  SWEEP_CHECK(records3 == (has3 ? kTensorsPerStep : 0u), records3 << " tensor records of step 3");
  return "ok " + outcome + (has3 && step3_failed ? " durable" : "");
}

class IoFaultSweepTest : public ::testing::TestWithParam<SweepCase> {};

TEST_P(IoFaultSweepTest, EveryFaultIsTypedAtomicAndRecoverable) {
  const SweepCase c = GetParam();
  TempDir dir;
  const std::string base = dir.Sub("base");
  // RocksDB's background threads do not survive a fork: this process must
  // never open a database itself, so even the base store is made in a child.
  ASSERT_EQ(RunIsolated([&]() -> std::string {
              auto store = Store::Open(base, TestStoreOptions());
              if (!store.ok()) return store.status().ToString();
              for (int64_t step : {1, 2}) {
                Status s = WriteStep(**store, step);
                if (!s.ok()) return s.ToString();
              }
              return "";
            }),
            "");
  uint64_t points = 0, open_failed = 0, capture_failed = 0, absorbed = 0, durable = 0, failed = 0;
  uint64_t n = 1;
  for (; n <= kMaxFaultPoint; ++n) {
    const std::string path = dir.Sub("s" + std::to_string(n));
    CopyDir(base, path);
    const std::string out = RunIsolated([&] { return RunFaultPoint(c, n, path); });
    std::filesystem::remove_all(path);
    if (out == "done") break;
    ++points;
    if (out.rfind("ok ", 0) == 0) {
      open_failed += out.find("open_failed") != std::string::npos;
      capture_failed += out.find("capture_failed") != std::string::npos;
      absorbed += out.find("absorbed") != std::string::npos;
      durable += out.find("durable") != std::string::npos;
    } else {
      ++failed;
      ADD_FAILURE() << "fault at " << FsOpName(c.op) << " #" << n << ": " << out;
    }
  }
  EXPECT_LE(n, kMaxFaultPoint) << "the sweep did not terminate";
  std::printf("[ io-fault ] %s %s %s: %llu fault points swept (open failed %llu, capture failed %llu, "
              "absorbed %llu, failed-but-durable %llu, check failures %llu)\n",
              FsOpName(c.op), c.persistent ? "persistent" : "one-shot", c.no_space ? "NoSpace" : "IOError",
              (unsigned long long)points, (unsigned long long)open_failed, (unsigned long long)capture_failed,
              (unsigned long long)absorbed, (unsigned long long)durable, (unsigned long long)failed);
}

INSTANTIATE_TEST_SUITE_P(
    AllOps, IoFaultSweepTest,
    ::testing::Values(SweepCase{FsOp::kCreate, false, false}, SweepCase{FsOp::kCreate, true, false},
                      SweepCase{FsOp::kAppend, false, false}, SweepCase{FsOp::kAppend, true, false},
                      SweepCase{FsOp::kAppend, false, true}, SweepCase{FsOp::kAppend, true, true},
                      SweepCase{FsOp::kSync, false, false}, SweepCase{FsOp::kSync, true, false},
                      SweepCase{FsOp::kSync, false, true}, SweepCase{FsOp::kRename, false, false},
                      SweepCase{FsOp::kRename, true, false}, SweepCase{FsOp::kRead, false, false},
                      SweepCase{FsOp::kRead, true, false}, SweepCase{FsOp::kDirSync, false, false},
                      SweepCase{FsOp::kDirSync, true, false}),
    CaseName);

}  // namespace
}  // namespace trainsnap::testing
