// DistributedCheckpointer across processes: every rank is a
// trainsnap_dist_rank process on 127.0.0.1 (Gloo over a FileStore
// rendezvous), exec'ed by this test before any store is opened.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::string RankBinary() { return (fs::path(TRAINSNAP_DIST_RANK_DIR) / "trainsnap_dist_rank").string(); }

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "trainsnap_dist_XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct RankResult {
  int exit_code = -1;  // -SIGNAL when killed
  std::map<std::string, std::string> values;
  std::string state;  // the rank's dump, when it wrote one
};

// One launch of `world` ranks of a scenario.
class Launch {
 public:
  Launch(const std::string& dir, const std::string& tag, int world, std::map<std::string, std::string> args,
         const std::map<int, std::string>& env_by_rank = {})
      : dir_(dir), tag_(tag) {
    const std::string rendezvous = dir + "/rdv-" + tag;
    for (int rank = 0; rank < world; ++rank) {
      std::vector<std::string> argv{RankBinary()};
      args["rank"] = std::to_string(rank);
      args["world"] = std::to_string(world);
      args["rendezvous"] = rendezvous;
      args["out"] = OutPath(rank);
      for (const auto& [k, v] : args) {
        argv.push_back("--" + k);
        argv.push_back(v);
      }
      std::vector<char*> raw;
      for (std::string& a : argv) raw.push_back(a.data());
      raw.push_back(nullptr);
      const pid_t pid = fork();
      if (pid == 0) {
        auto env = env_by_rank.find(rank);
        if (env != env_by_rank.end()) {
          const size_t eq = env->second.find('=');
          setenv(env->second.substr(0, eq).c_str(), env->second.substr(eq + 1).c_str(), 1);
        }
        execv(raw[0], raw.data());
        _exit(127);
      }
      pids_.push_back(pid);
    }
  }

  ~Launch() { KillAll(); }

  pid_t pid(int rank) const { return pids_[static_cast<size_t>(rank)]; }
  void Kill(int rank) { kill(pids_[static_cast<size_t>(rank)], SIGKILL); }
  void KillAll() {
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (!reaped_[r]) kill(pids_[r], SIGKILL);
    }
    Wait(std::chrono::seconds(30));
  }

  // Waits for every rank up to `limit`, then SIGKILLs the rest.
  std::vector<RankResult> Wait(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    reaped_.resize(pids_.size(), false);
    codes_.resize(pids_.size(), -1);
    for (;;) {
      bool all = true;
      for (size_t r = 0; r < pids_.size(); ++r) {
        if (reaped_[r]) continue;
        int status = 0;
        if (waitpid(pids_[r], &status, WNOHANG) == pids_[r]) {
          reaped_[r] = true;
          codes_[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        } else {
          all = false;
        }
      }
      if (all) break;
      if (std::chrono::steady_clock::now() > deadline) {
        for (size_t r = 0; r < pids_.size(); ++r) {
          if (!reaped_[r]) kill(pids_[r], SIGKILL);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::vector<RankResult> results(pids_.size());
    for (size_t r = 0; r < pids_.size(); ++r) {
      results[r].exit_code = codes_[r];
      std::ifstream in(OutPath(static_cast<int>(r)));
      std::string line;
      while (std::getline(in, line)) {
        const size_t space = line.find(' ');
        results[r].values[line.substr(0, space)] = space == std::string::npos ? "" : line.substr(space + 1);
      }
      std::ifstream state(OutPath(static_cast<int>(r)) + ".state", std::ios::binary);
      std::stringstream bytes;
      bytes << state.rdbuf();
      results[r].state = bytes.str();
    }
    return results;
  }

 private:
  std::string OutPath(int rank) const { return dir_ + "/out-" + tag_ + "-" + std::to_string(rank); }

  const std::string dir_;
  const std::string tag_;
  std::vector<pid_t> pids_;
  std::vector<bool> reaped_;
  std::vector<int> codes_;
};

std::vector<RankResult> RunAll(const std::string& dir, const std::string& tag, int world,
                               const std::map<std::string, std::string>& args,
                               const std::map<int, std::string>& env_by_rank = {}) {
  Launch launch(dir, tag, world, args, env_by_rank);
  return launch.Wait(std::chrono::seconds(60));
}

void ExpectAllExited(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << " error: " << results[r].values.count("error")
                                       << " " << (results[r].values.count("error") ? results[r].values.at("error") : "");
  }
}

// An uninterrupted run of `steps` steps: every rank's final state.
std::vector<std::string> Reference(const std::string& dir, int world, int steps, bool sharded) {
  const std::string run = dir + "/reference";
  std::vector<RankResult> results = RunAll(dir, "reference", world,
      {{"scenario", "train"}, {"run_dir", run}, {"steps", std::to_string(steps)}, {"sharded", sharded ? "1" : "0"}});
  ExpectAllExited(results);
  std::vector<std::string> states;
  std::string expected_steps;
  for (int s = 1; s <= steps; ++s) expected_steps += (s > 1 ? "," : "") + std::to_string(s);
  for (const RankResult& r : results) {
    EXPECT_EQ(r.values.at("steps"), expected_steps);
    EXPECT_FALSE(r.state.empty());
    states.push_back(r.state);
  }
  return states;
}

TEST(DistributedCheckpointerTest, DataParallelResumeIsBitwiseEqualAndStepsAreGlobal) {
  TempDir dir;
  const int world = 3, steps = 6;
  const std::vector<std::string> reference = Reference(dir.path(), world, steps, false);
  ASSERT_EQ(reference.size(), 3u);
  // Replicated model and optimizer: every rank ends with the same parameters
  // and optimizer state; only the dropout RNG differs.
  EXPECT_NE(reference[0], reference[1]);

  const std::string run = dir.path() + "/run";
  // First half, then a restart that resumes from the latest global step.
  ExpectAllExited(RunAll(dir.path(), "half", world, {{"scenario", "train"}, {"run_dir", run}, {"steps", "3"}}));
  std::vector<RankResult> resumed = RunAll(dir.path(), "resume", world,
      {{"scenario", "train"}, {"run_dir", run}, {"steps", std::to_string(steps)}, {"resume", "1"}});
  ExpectAllExited(resumed);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(resumed[r].values.at("resumed"), "3") << "rank " << r;
    EXPECT_EQ(resumed[r].values.at("steps"), "1,2,3,4,5,6") << "rank " << r;
    EXPECT_TRUE(resumed[r].state == reference[r]) << "rank " << r << " differs from the uninterrupted run";
  }
}

TEST(DistributedCheckpointerTest, MismatchedModelOnOneRankFailsEveryRankIdenticallyAndChangesNothing) {
  TempDir dir;
  const int world = 3;
  std::vector<RankResult> results = RunAll(dir.path(), "mismatch", world,
      {{"scenario", "mismatch"}, {"run_dir", dir.path() + "/run"}, {"bad", "1"}});
  ExpectAllExited(results);
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(results[r].values.at("restore_code"), "ContractMismatch");
    EXPECT_EQ(results[r].values.at("restore_message"), results[0].values.at("restore_message"));
    EXPECT_EQ(results[r].values.at("unchanged"), "1");
    EXPECT_EQ(results[r].values.at("good_restore_code"), "OK");
    EXPECT_EQ(results[r].values.at("restored_equal"), "1");
  }
  const std::string& message = results[0].values.at("restore_message");
  EXPECT_EQ(message.rfind("rank 1: ", 0), 0u) << message;
  EXPECT_NE(message.find("restore step 2"), std::string::npos) << message;
}

TEST(DistributedCheckpointerTest, WorldSizeMismatchIsContractMismatchNamingBothSizes) {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  ExpectAllExited(RunAll(dir.path(), "two", 2, {{"scenario", "world"}, {"run_dir", run}, {"phase", "capture"}}));
  std::vector<RankResult> results =
      RunAll(dir.path(), "three", 3, {{"scenario", "world"}, {"run_dir", run}, {"phase", "restore"}});
  ExpectAllExited(results);
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(results[r].values.at("restore_code"), "ContractMismatch");
    EXPECT_EQ(results[r].values.at("restore_message"),
              "rank 0: restore step 2: world size: step 2 was captured by 2 ranks, this group has 3");
    EXPECT_EQ(results[r].values.at("unchanged"), "1");
  }
}

TEST(DistributedCheckpointerTest, DeadRankIsAnErrorWithinTheTimeoutAndNothingPartialBecomesGlobal) {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  const int world = 3, victim = 2;
  std::vector<RankResult> results = RunAll(dir.path(), "dead", world,
      {{"scenario", "dead"}, {"run_dir", run}, {"victim", std::to_string(victim)}, {"timeout_ms", "3000"}});
  EXPECT_EQ(results[victim].exit_code, -SIGKILL);
  for (int r = 0; r < world; ++r) {
    if (r == victim) continue;
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(results[r].exit_code, 0);
    EXPECT_EQ(results[r].values.at("capture_code"), "Aborted");
    EXPECT_NE(results[r].values.at("capture_message").find("capture step 3: a collective of the 3 ranks failed"),
              std::string::npos)
        << results[r].values.at("capture_message");
    EXPECT_LT(std::stoll(results[r].values.at("elapsed_ms")), 3000 + 2000);
    // Broken from then on: every later call fails with the same error.
    EXPECT_EQ(results[r].values.at("again_code"), "Aborted");
    EXPECT_EQ(results[r].values.at("again_message"), results[r].values.at("capture_message"));
    EXPECT_EQ(results[r].values.at("restore_code"), "Aborted");
  }
  // Restarted, every rank sees steps 1-2 only, and step 3 can be captured
  // again (the survivors' local snapshots of it were deleted at Open).
  std::vector<RankResult> after = RunAll(dir.path(), "after", world, {{"scenario", "steps"}, {"run_dir", run}});
  ExpectAllExited(after);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(after[r].values.at("steps"), "1,2") << "rank " << r;
    EXPECT_EQ(after[r].values.at("capture_next_code"), "OK") << "rank " << r;
  }
}

}  // namespace
