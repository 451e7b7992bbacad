// Bit-exact resume: a training process that snapshots every micro-step is
// SIGKILLed at a random micro-step (also mid-window); a fresh set of objects
// restores the latest snapshot and finishes the run. The result must equal an
// uninterrupted reference run bit for bit: parameters, gradients, every
// optimizer state tensor and counter, param-group options, scheduler, window,
// data cursor, RNG state and the loss of every remaining micro-step.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "resume/gan_workload.h"
#include "resume/lora_workload.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"
#include "trainsnap/checkpointer.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {
namespace {

namespace fs = std::filesystem;

// Seeds the choice of kill points; change it to explore other ones.
constexpr uint64_t kKillSeed = 20261129;
// A child that makes no progress for this long is declared hung.
constexpr int kChildTimeoutMs = 120'000;

using testing::TempDir;

// The helper binary sits next to this test binary (see CMakeLists.txt).
std::string ChildBinaryPath() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / "trainsnap_resume_child").string();
}

struct ChildOutcome {
  std::vector<int64_t> acks;  // steps whose Capture returned, in order
  // The step whose Capture had started but not returned when the child died
  // (the kill interrupted it), or -1.
  int64_t in_flight = -1;
  int wait_status = 0;
  std::string error;          // set when the run did not go as planned
};

// Runs the training child (fork + exec, before this process opens the store)
// in lock-step: after each acknowledged micro-step it may run exactly one
// more. After acknowledgement `kill_after` it is let go and SIGKILLed
// `kill_delay_us` later, somewhere in micro-step kill_after + 1 (training,
// capture or commit) or, if that finished, while it waits.
ChildOutcome RunChildAndKill(const std::string& store_path, const std::vector<std::string>& workload_args,
                             int64_t kill_after, int kill_delay_us) {
  ChildOutcome outcome;
  int ack[2], go[2];
  if (::pipe2(ack, O_CLOEXEC) != 0 || ::pipe2(go, O_CLOEXEC) != 0) {
    outcome.error = std::string("pipe2: ") + std::strerror(errno);
    return outcome;
  }
  // Everything exec needs is built before fork: the child of a threaded
  // process may only call async-signal-safe functions until exec.
  const std::string binary = ChildBinaryPath();
  std::vector<std::string> args = {binary,   "--store", store_path, "--ack-fd", std::to_string(ack[1]),
                                   "--go-fd", std::to_string(go[0])};
  args.insert(args.end(), workload_args.begin(), workload_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid < 0) {
    outcome.error = std::string("fork: ") + std::strerror(errno);
    return outcome;
  }
  if (pid == 0) {
    ::fcntl(ack[1], F_SETFD, 0);  // keep the child's pipe ends across exec
    ::fcntl(go[0], F_SETFD, 0);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(ack[1]);
  ::close(go[0]);

  bool killed = false;
  std::string pending;
  for (;;) {
    pollfd pfd{ack[0], POLLIN, 0};
    int ready = ::poll(&pfd, 1, kChildTimeoutMs);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      outcome.error = "child made no progress for " + std::to_string(kChildTimeoutMs) + " ms";
      ::kill(pid, SIGKILL);
      killed = true;
      continue;
    }
    char buf[256];
    ssize_t n = ::read(ack[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child is gone
    pending.append(buf, static_cast<size_t>(n));
    while (pending.size() >= sizeof(int64_t)) {
      int64_t step;
      std::memcpy(&step, pending.data(), sizeof(step));
      pending.erase(0, sizeof(step));
      if (step < 0) {  // Capture(~step) started
        outcome.in_flight = ~step;
        continue;
      }
      outcome.in_flight = -1;
      outcome.acks.push_back(step);
      if (killed) continue;
      const char go_byte = 1;
      if (::write(go[1], &go_byte, 1) != 1) continue;  // the child died on its own: EOF follows
      if (step == kill_after) {
        if (kill_delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(kill_delay_us));
        ::kill(pid, SIGKILL);
        killed = true;
      }
    }
  }
  ::close(ack[0]);
  ::close(go[1]);
  while (::waitpid(pid, &outcome.wait_status, 0) < 0 && errno == EINTR) {
  }
  if (outcome.error.empty() && !(WIFSIGNALED(outcome.wait_status) && WTERMSIG(outcome.wait_status) == SIGKILL)) {
    outcome.error = "child was not SIGKILLed: wait status " + std::to_string(outcome.wait_status) +
                    " (exit code " + std::to_string(WIFEXITED(outcome.wait_status) ? WEXITSTATUS(outcome.wait_status) : -1) +
                    "), " + std::to_string(outcome.acks.size()) + " micro-steps acknowledged";
  }
  return outcome;
}

// Names of the entries of two flattened training states that differ (or, if
// the lists do not line up, a description of the first misalignment).
std::vector<std::string> DifferingEntries(const NamedTensors& expected, const NamedTensors& actual) {
  std::vector<std::string> differing;
  if (expected.size() != actual.size()) {
    differing.push_back("number of entries: " + std::to_string(actual.size()) + " vs " +
                        std::to_string(expected.size()));
  }
  for (size_t i = 0; i < expected.size() && i < actual.size(); ++i) {
    if (expected[i].first != actual[i].first) {
      differing.push_back("entry " + std::to_string(i) + " is `" + actual[i].first + "`, expected `" +
                          expected[i].first + "`");
      break;
    }
    if (!BitwiseEqual(expected[i].second, actual[i].second)) differing.push_back(expected[i].first);
  }
  return differing;
}

// The entry called `name`, or an undefined tensor.
torch::Tensor Entry(const NamedTensors& state, const std::string& name) {
  for (const auto& [entry_name, tensor] : state) {
    if (entry_name == name) return tensor;
  }
  return torch::Tensor();
}

// `state` as a restore of a snapshot taken at a window boundary leaves it:
// with the default Gradients::kAuto such a snapshot omits the gradients (the
// next window zeroes them first), and restore sets every defined one to zeros.
NamedTensors WithGradientsZeroed(NamedTensors state) {
  for (auto& [name, tensor] : state) {
    if (name.rfind("grad/", 0) == 0 && tensor.defined()) tensor = torch::zeros_like(tensor);
  }
  return state;
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// Where a killed child left its store: the store, reopened, and the step to
// resume from.
struct ResumePoint {
  std::unique_ptr<Store> store;
  int64_t last_ack = -1;             // the last step whose Capture returned
  bool capture_interrupted = false;  // the kill landed inside the next Capture
  int64_t restored = -1;             // the store's latest step
};

// Checks that the child was killed in lock-step (every micro-step
// acknowledged in order, at most one past `kill_after`) and opens its store.
// The latest snapshot must be the last acknowledged one, unless the kill
// interrupted the next Capture after its commit reached the WAL (a process
// crash loses no written data): an interrupted capture is atomic, either
// wholly visible or not at all.
void OpenAfterKill(const ChildOutcome& child, int64_t kill_after, const std::string& store_path, ResumePoint* out) {
  ASSERT_TRUE(child.error.empty()) << child.error;
  ASSERT_FALSE(child.acks.empty());
  for (size_t i = 0; i < child.acks.size(); ++i) ASSERT_EQ(child.acks[i], static_cast<int64_t>(i));
  const int64_t last_ack = child.acks.back();
  ASSERT_GE(last_ack, kill_after);
  ASSERT_LE(last_ack, kill_after + 1);
  const bool capture_interrupted = child.in_flight == last_ack + 1;
  Result<std::unique_ptr<Store>> store = Store::Open(store_path);
  ASSERT_OK(store.status());
  auto latest = (*store)->Latest();
  ASSERT_OK(latest.status());
  ASSERT_TRUE(latest->has_value());
  if (capture_interrupted) {
    ASSERT_TRUE(**latest == last_ack || **latest == last_ack + 1)
        << "latest snapshot " << **latest << ", last acknowledged " << last_ack << ", interrupted " << last_ack + 1;
  } else {
    ASSERT_EQ(**latest, last_ack) << "the latest snapshot is not the last acknowledged one";
  }
  *out = {std::move(store).value(), last_ack, capture_interrupted, **latest};
}

// The uninterrupted reference: the state after every micro-step.
struct Reference {
  std::vector<NamedTensors> states;  // by micro-step index
  std::vector<std::pair<int64_t, double>> losses;
};

Reference RunReference(OptimizerKind kind) {
  Reference ref;
  LoraRun run(kind, kTrainSeed);
  torch::manual_seed(kTrainSeed);
  while (run.cursor().position() < kTotalMicroSteps) {
    Status s = run.MicroStep();
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) break;
    ref.states.push_back(CollectTrainingState(run));
  }
  ref.losses = run.losses();
  return ref;
}

class BitExactResumeTest : public ::testing::TestWithParam<OptimizerKind> {
 protected:
  // Reference and child both train with one intra-op thread: the order of a
  // parallel reduction, and so the bits of its result, depends on it.
  void SetUp() override { torch::set_num_threads(1); }
};

TEST_P(BitExactResumeTest, SigkilledRunResumesBitExactly) {
  const OptimizerKind kind = GetParam();
  const Reference ref = RunReference(kind);
  ASSERT_EQ(ref.states.size(), static_cast<size_t>(kTotalMicroSteps));

  // Kill point: a seeded random window, and a position in it that differs per
  // optimizer (positions 0..2 leave the next snapshot mid-window).
  std::mt19937_64 rng(kKillSeed + static_cast<uint64_t>(kind));
  const int64_t window = std::uniform_int_distribution<int64_t>(2, kOptimizerSteps - 3)(rng);
  const int64_t position = static_cast<int64_t>(kind) % kWindowSize;
  const int64_t kill_after = window * kWindowSize + position;
  // How long after letting the child go the kill lands: a short delay mostly
  // hits the forward/backward pass, a long one mostly the Capture (its WAL sync).
  const bool hit_capture = static_cast<int>(kind) % 2 == 1;
  const int kill_delay_us = std::uniform_int_distribution<int>(hit_capture ? 500 : 0, hit_capture ? 4000 : 150)(rng);

  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string store_path = dir.path() + "/store";
  const ChildOutcome child = RunChildAndKill(
      store_path, {"--optimizer", std::string(OptimizerKindName(kind))}, kill_after, kill_delay_us);
  ResumePoint point;
  ASSERT_NO_FATAL_FAILURE(OpenAfterKill(child, kill_after, store_path, &point));
  const int64_t restored = point.restored;

  // Resume, in this process, into freshly constructed objects: other adapter
  // init, empty optimizer state, scheduler at 0, cursor at 0, another RNG seed.
  torch::manual_seed(kFreshSeed);
  Checkpointer checkpointer(*point.store);
  LoraRun resumed(kind, kFreshSeed);
  // The fresh objects differ from the reference in every trainable tensor,
  // the cursor and the RNG: equality below has to be restored, not inherited.
  {
    const NamedTensors fresh = CollectTrainingState(resumed);
    for (const char* name : {"param/l1.lora_a", "param/l2.lora_b", "grad/l2.lora_a",
                             "scheduler/step_count", "cursor/position", "rng/cpu"}) {
      EXPECT_FALSE(BitwiseEqual(Entry(ref.states[restored], name), Entry(fresh, name)))
          << "fresh objects already hold the reference's " << name;
    }
  }
  Result<int64_t> restored_step = checkpointer.RestoreLatest(resumed.State());
  ASSERT_OK(restored_step.status());
  EXPECT_EQ(*restored_step, restored);

  EXPECT_EQ(resumed.cursor().position(), restored + 1);
  EXPECT_EQ(resumed.window().micro_step, (restored + 1) % kWindowSize);
  const bool at_boundary = (restored + 1) % kWindowSize == 0;
  const auto after_restore = DifferingEntries(
      at_boundary ? WithGradientsZeroed(ref.states[restored]) : ref.states[restored], CollectTrainingState(resumed));
  ASSERT_TRUE(after_restore.empty()) << "right after restoring step " << restored
                                     << ", these differ from the reference: " << Join(after_restore);

  while (resumed.cursor().position() < kTotalMicroSteps) {
    const int64_t step = resumed.cursor().position();
    ASSERT_OK(resumed.MicroStep());
    ASSERT_OK(checkpointer.Capture(step, resumed.State()));
  }
  const NamedTensors final_state = CollectTrainingState(resumed);
  const auto at_end = DifferingEntries(ref.states.back(), final_state);
  EXPECT_TRUE(at_end.empty()) << "final state, these differ from the reference: " << Join(at_end);

  // Every loss after the resume point matches the reference bit for bit.
  const auto& losses = resumed.losses();
  ASSERT_EQ(losses.size(), static_cast<size_t>(kTotalMicroSteps - restored - 1));
  for (const auto& [index, loss] : losses) {
    ASSERT_EQ(std::memcmp(&loss, &ref.losses[index].second, sizeof(double)), 0)
        << "loss of micro-step " << index << ": " << loss << " vs reference " << ref.losses[index].second;
  }

  auto final_latest = point.store->Latest();
  ASSERT_OK(final_latest.status());
  EXPECT_EQ(final_latest->value_or(-1), kTotalMicroSteps - 1);
  std::printf("[ resume   ] %s: let go after micro-step %lld, SIGKILL %d us later%s; last acknowledged %lld, "
              "resumed from %lld (next window position %lld/%lld)\n",
              std::string(OptimizerKindName(kind)).c_str(), static_cast<long long>(kill_after), kill_delay_us,
              point.capture_interrupted ? " inside a Capture" : "", static_cast<long long>(point.last_ack),
              static_cast<long long>(restored), static_cast<long long>((restored + 1) % kWindowSize),
              static_cast<long long>(kWindowSize));
}

// The bit-exact test has teeth only if every piece of state steers the run.
// In-process (no kill): restore a mid-window snapshot into fresh objects, spoil
// one piece of what was restored, finish the run; only the untouched resume may
// match the reference.
TEST(ResumeSensitivityTest, EveryRestoredPieceChangesTheOutcome) {
  torch::set_num_threads(1);
  const OptimizerKind kind = OptimizerKind::kAdamW;
  const Reference ref = RunReference(kind);
  ASSERT_EQ(ref.states.size(), static_cast<size_t>(kTotalMicroSteps));
  const int64_t snapshot_step = 5 * kWindowSize + 1;  // second micro-step of window 5

  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  auto store = Store::Open(dir.path() + "/store");
  ASSERT_OK(store.status());
  Checkpointer checkpointer(**store);
  {
    LoraRun run(kind, kTrainSeed);
    torch::manual_seed(kTrainSeed);
    while (run.cursor().position() <= snapshot_step) ASSERT_OK(run.MicroStep());
    ASSERT_OK(checkpointer.Capture(snapshot_step, run.State()));
  }

  struct Spoiler {
    const char* what;
    std::function<void(LoraRun&)> spoil;
  };
  const std::vector<Spoiler> spoilers = {
      {"nothing", [](LoraRun&) {}},
      {"RNG state (dropout masks)", [](LoraRun&) { torch::manual_seed(kFreshSeed); }},
      {"pending gradients", [](LoraRun& r) {
         torch::NoGradGuard no_grad;
         for (auto& p : r.model()->parameters()) {
           if (p.grad().defined()) p.mutable_grad().zero_();
         }
       }},
      {"window weight sum", [](LoraRun& r) { r.mutable_window().weight_sum += 1.0; }},
      {"scheduler step count", [](LoraRun& r) { r.scheduler().step(); }},
      {"learning rate", [](LoraRun& r) {
         auto& options = r.optimizer().param_groups()[1].options();
         options.set_lr(options.get_lr() * 1.5);
       }},
      {"AdamW second moment", [](LoraRun& r) {
         torch::NoGradGuard no_grad;
         for (auto& entry : r.optimizer().state()) {
           static_cast<torch::optim::AdamWParamState&>(*entry.second).exp_avg_sq().mul_(2.0);
         }
       }},
      {"data cursor", [](LoraRun& r) {
         std::string bytes = r.State().extra["data_cursor"]->SaveState();
         const int64_t skipped = r.cursor().position() + 1;
         std::memcpy(bytes.data(), &skipped, sizeof(skipped));
         ASSERT_OK(r.State().extra["data_cursor"]->LoadState(bytes));
       }},
  };
  for (const Spoiler& spoiler : spoilers) {
    SCOPED_TRACE(spoiler.what);
    torch::manual_seed(kFreshSeed + 1);
    LoraRun resumed(kind, kFreshSeed);
    ASSERT_OK(checkpointer.Restore(snapshot_step, resumed.State()));
    spoiler.spoil(resumed);
    while (resumed.cursor().position() < kTotalMicroSteps) ASSERT_OK(resumed.MicroStep());
    const auto differing = DifferingEntries(ref.states.back(), CollectTrainingState(resumed));
    if (std::string(spoiler.what) == "nothing") {
      EXPECT_TRUE(differing.empty()) << Join(differing);
    } else {
      // The final parameters themselves must have moved, not just the spoiled entry.
      EXPECT_NE(std::find(differing.begin(), differing.end(), "param/l1.lora_a"), differing.end())
          << "spoiling the " << spoiler.what << " left the trajectory unchanged: " << Join(differing);
    }
  }
}

// Two models with two optimizers (a GAN's generator and discriminator, with
// BatchNorm in training mode) are one atomic snapshot, captured and restored
// with the Checkpointer's defaults only: killed at a random step, resumed
// into fresh objects, bit for bit.
TEST(BitExactResumeTwoModelsTest, SigkilledGanResumesBitExactly) {
  torch::set_num_threads(1);
  std::vector<NamedTensors> ref_states;
  std::vector<std::pair<int64_t, double>> ref_losses;
  {
    GanRun reference(kTrainSeed);
    torch::manual_seed(kTrainSeed);
    while (reference.cursor().position() < kGanSteps) {
      ASSERT_OK(reference.MicroStep());
      ref_states.push_back(CollectGanState(reference));
    }
    ref_losses = reference.losses();
  }
  std::mt19937_64 rng(kKillSeed);
  const int64_t kill_after = std::uniform_int_distribution<int64_t>(5, kGanSteps - 10)(rng);
  const int kill_delay_us = std::uniform_int_distribution<int>(0, 3000)(rng);

  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string store_path = dir.path() + "/store";
  const ChildOutcome child = RunChildAndKill(store_path, {"--workload", "gan"}, kill_after, kill_delay_us);
  ResumePoint point;
  ASSERT_NO_FATAL_FAILURE(OpenAfterKill(child, kill_after, store_path, &point));
  const int64_t restored = point.restored;

  torch::manual_seed(kFreshSeed);
  Checkpointer checkpointer(*point.store);
  GanRun resumed(kFreshSeed);
  {
    const NamedTensors fresh = CollectGanState(resumed);
    // The BatchNorm statistics too: the Checkpointer's defaults must carry them.
    for (const char* name : {"param/generator.0.weight", "param/discriminator.4.bias", "buffer/generator.1.running_mean",
                             "buffer/discriminator.1.running_var", "buffer/generator.1.num_batches_tracked", "rng/cpu"}) {
      EXPECT_FALSE(BitwiseEqual(Entry(ref_states[restored], name), Entry(fresh, name))) << name;
    }
  }
  Result<int64_t> restored_step = checkpointer.RestoreLatest(resumed.State());
  ASSERT_OK(restored_step.status());
  EXPECT_EQ(*restored_step, restored);
  const auto after_restore = DifferingEntries(ref_states[restored], CollectGanState(resumed));
  ASSERT_TRUE(after_restore.empty()) << "right after restoring step " << restored << ": " << Join(after_restore);

  while (resumed.cursor().position() < kGanSteps) {
    const int64_t step = resumed.cursor().position();
    ASSERT_OK(resumed.MicroStep());
    ASSERT_OK(checkpointer.Capture(step, resumed.State()));
  }
  const auto at_end = DifferingEntries(ref_states.back(), CollectGanState(resumed));
  EXPECT_TRUE(at_end.empty()) << "final state: " << Join(at_end);
  ASSERT_EQ(resumed.losses().size(), static_cast<size_t>(kGanSteps - restored - 1));
  for (const auto& [index, loss] : resumed.losses()) {
    ASSERT_EQ(std::memcmp(&loss, &ref_losses[index].second, sizeof(double)), 0) << "loss of step " << index;
  }
  std::printf("[ resume   ] gan: killed %d us after step %lld%s, resumed from %lld\n", kill_delay_us,
              static_cast<long long>(kill_after), point.capture_interrupted ? " inside a Capture" : "",
              static_cast<long long>(restored));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, BitExactResumeTest, ::testing::ValuesIn(AllOptimizerKinds()),
                         [](const ::testing::TestParamInfo<OptimizerKind>& info) {
                           return std::string(OptimizerKindName(info.param));
                         });

}  // namespace
}  // namespace trainsnap::internal
