// Crash test: a child process captures snapshots in a loop (with GC
// and rollbacks mixed in) and acknowledges each only after it returned OK; we
// SIGKILL it at random moments and it kills itself at named kill points
// (after the chunks, before the commit, after the commit before the
// acknowledgement, in the middle of GC). After every kill the store must open,
// hold every acknowledged snapshot and restore it bit-exactly, show nothing
// partial or unexpected, and its next GC must leave no orphaned chunk.
// TRAINSNAP_CRASH_KILLS sets the number of kills (default 100, about 13 per
// named kill point, in CI; soak: 1000+).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "crash/crash_state.h"
#include "store/kill_point.h"
#include "testing/temp_dir.h"
#include "trainsnap/checkpointer.h"
#include "trainsnap/store.h"

namespace trainsnap::testing {
namespace {

// Kill points armed in the child (see src/store/kill_point.h), and the
// child's own between Capture's return and its acknowledgement.
const std::vector<std::string> kNamedKillPoints = {
    internal::kKillAfterChunks, internal::kKillBeforeCommit, internal::kKillAfterCommit,
    "child.before_ack", internal::kKillGcMidway};

std::string ChildPath() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  self[n] = '\0';
  return (std::filesystem::path(self).parent_path() / "trainsnap_crash_child").string();
}

struct ChildRun {
  std::vector<std::string> lines;  // what the child reported
  bool killed = false;             // died of SIGKILL
  std::string error;
};

// Starts the child (fork + exec: this process runs LibTorch and RocksDB
// threads, which a plain fork would not carry over), reads its reports, and
// kills it `delay_us` after its `kill_after_acks`-th acknowledgement (or,
// with `after_open`, after it said it opens the store), or waits for it to
// kill itself at an armed kill point.
ChildRun RunChild(const std::string& store, int64_t first_step, const std::string& kill_point, int kill_after_acks,
                  int delay_us, bool after_open = false) {
  ChildRun run;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {{}, false, "pipe failed"};
  const std::string exe = ChildPath(), step = std::to_string(first_step), fd = std::to_string(fds[1]);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "TRAINSNAP_KILL_POINT=", 21) != 0) env_strings.emplace_back(*e);
  }
  if (!kill_point.empty()) env_strings.push_back("TRAINSNAP_KILL_POINT=" + kill_point);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> argv = {const_cast<char*>(exe.c_str()), const_cast<char*>(store.c_str()),
                             const_cast<char*>(step.c_str()), const_cast<char*>(fd.c_str()), nullptr};
  const pid_t pid = ::fork();
  if (pid < 0) return {{}, false, "fork failed"};
  if (pid == 0) {
    ::fcntl(fds[1], F_SETFD, 0);  // the report end survives exec
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string buffer;
  int acks = 0;
  bool opening = false, sent_kill = false;
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, 100);
    if (ready > 0) {
      char buf[4096];
      const ssize_t n = ::read(fds[0], buf, sizeof(buf));
      if (n <= 0) break;  // the child is gone
      buffer.append(buf, static_cast<size_t>(n));
      for (size_t nl; (nl = buffer.find('\n')) != std::string::npos; buffer.erase(0, nl + 1)) {
        run.lines.push_back(buffer.substr(0, nl));
        if (run.lines.back()[0] == 'C') ++acks;
        if (run.lines.back()[0] == 'O') opening = true;
      }
    }
    if (kill_point.empty() && !sent_kill && (after_open ? opening : acks >= kill_after_acks)) {
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      ::kill(pid, SIGKILL);
      sent_kill = true;
    }
    if (std::chrono::steady_clock::now() > deadline && !sent_kill) {
      run.error = "the child neither reached its kill point nor was killed in 60 s";
      ::kill(pid, SIGKILL);
      sent_kill = true;
    }
  }
  // Reports written before the kill are all read: the pipe drained to EOF.
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  run.killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  if (!run.killed && run.error.empty()) {
    run.error = "the child ended without SIGKILL (status " + std::to_string(status) + ")";
  }
  for (const std::string& l : run.lines) {
    if (l[0] == 'E') run.error = "child: " + l;
  }
  return run;
}

int KillsFromEnv() {
  const char* env = std::getenv("TRAINSNAP_CRASH_KILLS");
  return env ? std::max(1, std::atoi(env)) : 100;
}

TEST(CrashTest, KillsNeverLoseOrTearAcknowledgedSnapshots) {
  ASSERT_TRUE(std::filesystem::exists(ChildPath())) << ChildPath();
  torch::set_num_threads(1);
  const int kills = KillsFromEnv();
  TempDir dir;
  const std::string path = dir.Sub("store");
  std::mt19937 rng(7);
  std::set<int64_t> expected;  // acknowledged and not rolled back: must be present
  int64_t next_step = 1;
  uint64_t acknowledged = 0, lost = 0, torn = 0, phantom = 0, restored = 0, orphans_collected = 0;
  std::map<std::string, int> kills_at;
  int kill_count = 0;
  for (int k = 0; k < kills && !HasFatalFailure(); ++k) {
    // Every third kill is a random moment; the others cycle through the kill points.
    std::string point;
    int after_acks = 0, delay_us = 0;
    if (k % 3 == 0) {
      after_acks = static_cast<int>(rng() % 4);
      delay_us = static_cast<int>(rng() % 20000);
    } else {
      point = kNamedKillPoints[(k / 3 * 2 + k % 3 - 1) % kNamedKillPoints.size()];
    }
    const std::string armed = point.empty() ? "" : point + ":" + std::to_string(1 + rng() % 3);
    ChildRun run = RunChild(path, next_step, armed, after_acks, delay_us);
    ASSERT_TRUE(run.error.empty()) << "kill " << k << " (" << (point.empty() ? "random" : armed) << "): " << run.error;
    ++kill_count;
    ++kills_at[point.empty() ? "random moment" : point];

    // Replay the child's reports.
    std::optional<int64_t> in_flight, rollback_to;
    for (const std::string& l : run.lines) {
      const int64_t v = l.size() > 2 ? std::strtoll(l.c_str() + 2, nullptr, 10) : 0;
      switch (l[0]) {
        case 'S': in_flight = v; next_step = std::max(next_step, v + 1); break;
        case 'C': expected.insert(v); ++acknowledged; in_flight.reset(); break;
        case 'B': rollback_to = v; break;
        case 'R':
          expected.erase(expected.upper_bound(v), expected.end());
          rollback_to.reset();
          break;
        default: break;
      }
    }

    auto store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << "kill " << k << ": open after the kill: " << store.status().ToString();
    auto gc = (*store)->CollectGarbage();
    ASSERT_TRUE(gc.ok()) << gc.status().ToString();
    orphans_collected += gc->chunks_deleted;
    auto stats = (*store)->Stats();
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_EQ(stats->collectable_chunks, 0u) << "kill " << k << ": GC left orphaned chunks";
    auto list = (*store)->List();
    ASSERT_TRUE(list.ok()) << list.status().ToString();
    std::set<int64_t> present;
    for (const SnapshotInfo& info : *list) present.insert(info.step);
    // A rollback in flight deletes the later steps all together, or none.
    if (rollback_to) {
      std::set<int64_t> later(expected.upper_bound(*rollback_to), expected.end());
      size_t there = 0;
      for (int64_t s : later) there += present.count(s);
      EXPECT_TRUE(there == 0 || there == later.size()) << "kill " << k << ": a rollback was torn";
      if (there == 0) expected.erase(expected.upper_bound(*rollback_to), expected.end());
    }
    for (int64_t s : expected) {
      if (!present.count(s)) {
        ++lost;
        ADD_FAILURE() << "kill " << k << " (" << (point.empty() ? "random" : armed) << "): acknowledged step " << s
                      << " is lost";
      }
    }
    for (int64_t s : present) {
      if (!expected.count(s) && !(in_flight && *in_flight == s)) {
        ++phantom;
        ADD_FAILURE() << "kill " << k << ": step " << s << " was never captured or was rolled back";
      }
    }
    // Every present snapshot restores bit-exactly (the one in flight too:
    // committed before the kill, it must be whole).
    Checkpointer checkpointer(**store);
    for (int64_t s : present) {
      CrashState target = MakeCrashState(s + 1000003);  // same shapes, other values
      TrainingState ts;
      ts.model = target.model.ptr().get();
      ts.optimizer = target.optimizer.get();
      ts.rng = false;
      Status r = checkpointer.Restore(s, ts);
      std::string diff = r.ok() ? CompareCrashStates(target, MakeCrashState(s)) : r.ToString();
      if (!diff.empty()) {
        ++torn;
        ADD_FAILURE() << "kill " << k << ": step " << s << " does not restore bit-exactly: " << diff;
      }
      ++restored;
    }
    expected = present;
    // Keep the store (and the next restores) small: the newest 3 stay.
    RetentionPolicy keep;
    keep.keep_last = 3;
    auto pruned = (*store)->Prune(keep);
    ASSERT_TRUE(pruned.ok()) << pruned.status().ToString();
    for (int64_t s : pruned->deleted_steps) expected.erase(s);
    if ((k + 1) % 100 == 0) {
      std::printf("[ crash ] %d kills so far, %llu acknowledged snapshots\n", k + 1, (unsigned long long)acknowledged);
      std::fflush(stdout);
    }
  }
  std::printf("[ crash ] kills %d (", kill_count);
  for (const auto& [where, n] : kills_at) std::printf(" %s: %d", where.c_str(), n);
  std::printf(" ), acknowledged snapshots %llu, restored and compared %llu, lost %llu, torn %llu, phantom %llu, "
              "orphan chunks collected %llu\n",
              (unsigned long long)acknowledged, (unsigned long long)restored, (unsigned long long)lost,
              (unsigned long long)torn, (unsigned long long)phantom, (unsigned long long)orphans_collected);
  EXPECT_EQ(lost, 0u);
  EXPECT_EQ(torn, 0u);
  EXPECT_EQ(phantom, 0u);
  EXPECT_GT(acknowledged, 0u);
}

// Store creation killed at each of its kill points and at random moments in
// the first 300 ms of the child's Store::Open (creation takes about 200 ms).
// The directory is then absent or empty, a whole store, or a half-created
// one, which read-only opens name (NotFound, "store creation was
// interrupted") and the next writable open creates again (with a note).
// Whichever it is, that open works, every acknowledged snapshot restores
// bit-exactly and the store captures again.
TEST(CrashTest, KillsDuringCreationLeaveADirectoryTheNextOpenMakesAStore) {
  ASSERT_TRUE(std::filesystem::exists(ChildPath())) << ChildPath();
  torch::set_num_threads(1);
  const std::vector<std::string> points = {internal::kKillCreateMarked, internal::kKillCreateDatabase,
                                           internal::kKillCreateMeta, internal::kKillReserveWritten,
                                           internal::kKillCreateFinishing};
  // Every other kill is at a named point: enough kills to meet each once.
  const int kills = std::max(static_cast<int>(2 * points.size()), KillsFromEnv() / 5);
  TempDir dir;
  std::mt19937 rng(11);
  std::map<std::string, int> outcomes;
  uint64_t acknowledged = 0, restored = 0;
  for (int k = 0; k < kills && !HasFatalFailure(); ++k) {
    const std::string path = dir.Sub("create-" + std::to_string(k));
    const bool random = k % 2 == 1;
    const std::string point = random ? "" : points[(k / 2) % points.size()];
    const int delay_us = static_cast<int>(rng() % 300000);
    ChildRun run = RunChild(path, 1, point, 0, delay_us, /*after_open=*/true);
    const std::string what = random ? "random kill at " + std::to_string(delay_us / 1000) + " ms" : point;
    ASSERT_TRUE(run.error.empty()) << "kill " << k << " (" << what << "): " << run.error;
    // Acknowledged steps, less those a finished rollback deleted; a rollback
    // in flight deletes all the later steps or none.
    std::set<int64_t> expected;
    std::optional<int64_t> rollback_to;
    for (const std::string& l : run.lines) {
      const int64_t v = l.size() > 2 ? std::strtoll(l.c_str() + 2, nullptr, 10) : 0;
      if (l[0] == 'C') {
        expected.insert(v);
        ++acknowledged;
      } else if (l[0] == 'B') {
        rollback_to = v;
      } else if (l[0] == 'R') {
        expected.erase(expected.upper_bound(v), expected.end());
        rollback_to.reset();
      }
    }

    // What a reader sees: nothing, a half-created store, or a store.
    std::string outcome;
    {  // closed before the writer opens
      auto reader = Store::OpenReadOnly(path);
      if (reader.ok()) {
        outcome = "a store";
      } else if (reader.status().code() == StatusCode::kNotFound &&
                 reader.status().message().find("store creation was interrupted") != std::string::npos) {
        outcome = "half-created";
      } else if (reader.status().code() == StatusCode::kNotFound &&
                 reader.status().message().find("no store at this path") != std::string::npos) {
        outcome = "nothing";
      } else {
        ADD_FAILURE() << "kill " << k << " (" << what << "): read-only open: " << reader.status().ToString();
      }
    }
    ++outcomes[(random ? "random: " : point + ": ") + outcome];

    auto store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << "kill " << k << " (" << what << "): open after the kill: " << store.status().ToString();
    EXPECT_EQ((*store)->open_notes().empty(), outcome != "half-created") << "kill " << k << " (" << what << ")";
    auto list = (*store)->List();
    ASSERT_TRUE(list.ok()) << list.status().ToString();
    std::set<int64_t> present;
    for (const SnapshotInfo& info : *list) present.insert(info.step);
    if (rollback_to) {
      std::set<int64_t> later(expected.upper_bound(*rollback_to), expected.end());
      size_t there = 0;
      for (int64_t s : later) there += present.count(s);
      EXPECT_TRUE(there == 0 || there == later.size()) << "kill " << k << ": a rollback was torn";
      if (there == 0) expected.erase(expected.upper_bound(*rollback_to), expected.end());
    }
    for (int64_t s : expected) EXPECT_TRUE(present.count(s)) << "kill " << k << ": acknowledged step " << s << " lost";
    Checkpointer checkpointer(**store);
    const int64_t next = present.empty() ? 1 : *present.rbegin() + 1;
    {
      CrashState state = MakeCrashState(next);
      TrainingState ts;
      ts.model = state.model.ptr().get();
      ts.optimizer = state.optimizer.get();
      ts.rng = false;
      ASSERT_TRUE(checkpointer.Capture(next, ts).ok()) << "kill " << k << ": capture after the kill";
    }
    present.insert(next);
    for (int64_t s : present) {
      CrashState target = MakeCrashState(s + 1000003);
      TrainingState ts;
      ts.model = target.model.ptr().get();
      ts.optimizer = target.optimizer.get();
      ts.rng = false;
      Status r = checkpointer.Restore(s, ts);
      const std::string diff = r.ok() ? CompareCrashStates(target, MakeCrashState(s)) : r.ToString();
      EXPECT_TRUE(diff.empty()) << "kill " << k << " (" << what << "): step " << s << ": " << diff;
      ++restored;
    }
  }
  std::printf("[ crash ] creation kills %d (", kills);
  for (const auto& [where, n] : outcomes) std::printf(" %s: %d;", where.c_str(), n);
  std::printf(" ), acknowledged snapshots %llu, restored and compared %llu\n", (unsigned long long)acknowledged,
              (unsigned long long)restored);
  // Each named kill point stops a creation half way; every one of them was met.
  for (const std::string& p : points) EXPECT_GT(outcomes[p + ": half-created"], 0) << p;
}

// The named kill points are compiled into this build (CMake option
// TRAINSNAP_KILL_POINTS, on with the tests): otherwise the test above would
// silently degrade to random kills only.
TEST(CrashTest, KillPointsAreCompiledIn) { EXPECT_TRUE(internal::KillPointsCompiled()); }

}  // namespace
}  // namespace trainsnap::testing
