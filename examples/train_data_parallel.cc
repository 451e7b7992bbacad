// train_data_parallel: a data-parallel fine-tune over several processes
// (LibTorch c10d, Gloo on 127.0.0.1) that snapshots every step with a
// trainsnap DistributedCheckpointer; its data order is a ResumableSampler in
// distributed mode. Two demos: one SIGKILLs a rank mid-run, restarts every
// rank, and proves each rank's final state bitwise identical to a run that
// never stopped; the other trains on 4 ranks, restores the run on 2 (a lost
// node) and trains on.
//
//   train_data_parallel demo DIR [--ranks N] [--steps S]     the kill demo
//   (scripts/demo.sh) train_data_parallel elastic DIR [--from N] [--to M]
//   [--steps S]
//       S/2 steps on N ranks, then M ranks restore the latest global step
//       (each rank's restored state bitwise that of the same rank, or of
//       rank r % N, at capture) and train to step S.
//   train_data_parallel rank --rank R --world N --run-dir D --rendezvous FILE
//                            [--steps S] [--crash-at K] [--final FILE]
//                            [--restored FILE]
//       One rank. Resumes from the latest global step of D if there is one,
//       trains to step S with a CaptureAsync after every step. --crash-at K:
//       SIGKILLs itself right after staging step K. --final: writes the
//       rank's final training state (raw bytes) for the comparison;
//       --restored: the same, right after the restore.
#include <ATen/CPUGeneratorImpl.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <vector>

#include "trainsnap/distributed.h"
#include "trainsnap/sampler.h"

namespace {

namespace fs = std::filesystem;

constexpr int64_t kDim = 128;
constexpr int64_t kBatch = 32;         // samples per rank and step
constexpr size_t kSamples = 1 << 16;   // the dataset's size
constexpr uint64_t kModelSeed = 2024;  // the same model on every rank
constexpr uint64_t kDataSeed = 0xda7a;  // the sampler's shuffle

// Sample i of the dataset: its input and target depend on i alone.
std::pair<torch::Tensor, torch::Tensor> Batch(const std::vector<size_t>& indices) {
  std::vector<torch::Tensor> xs;
  for (size_t i : indices) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(kDataSeed + i);
    xs.push_back(torch::randn({kDim}, gen));
  }
  torch::Tensor x = torch::stack(xs);
  return {x, x.narrow(1, 0, 8).sum(1, true).tanh()};
}

// A frozen "pretrained" trunk and a trainable head with dropout.
class ModelImpl : public torch::nn::Module {
 public:
  ModelImpl() {
    trunk = register_module("trunk", torch::nn::Linear(kDim, kDim));
    for (torch::Tensor& p : trunk->parameters()) p.set_requires_grad(false);
    head1 = register_module("head1", torch::nn::Linear(kDim, kDim));
    head2 = register_module("head2", torch::nn::Linear(kDim, 1));
    dropout = register_module("dropout", torch::nn::Dropout(0.1));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(trunk->forward(x));
    return head2->forward(dropout->forward(torch::relu(head1->forward(x))));
  }
  torch::nn::Linear trunk{nullptr}, head1{nullptr}, head2{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(Model);

void Append(std::string* out, const torch::Tensor& t) {
  torch::Tensor c = t.detach().contiguous();
  out->append(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

// Parameters, optimizer state and the RNG as raw bytes: equal bytes, equal
// training state.
void WriteState(const std::string& path, Model& model, const std::vector<torch::Tensor>& trainable,
                torch::optim::AdamW& optimizer) {
  std::string bytes;
  for (const torch::Tensor& p : model->parameters()) Append(&bytes, p);
  for (const torch::Tensor& p : trainable) {
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(
        *optimizer.state().at(c10::guts::to_string(p.unsafeGetTensorImpl())));
    bytes += std::to_string(s.step());
    Append(&bytes, s.exp_avg());
    Append(&bytes, s.exp_avg_sq());
  }
  Append(&bytes, at::detail::getDefaultCPUGenerator().get_state());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

int RunRank(int rank, int world, const std::string& run_dir, const std::string& rendezvous, int64_t steps,
            int64_t crash_at, const std::string& final_path, const std::string& restored_path) {
  torch::set_num_threads(1);
  const std::chrono::seconds timeout(30);
  // The trainer's own process group, as any LibTorch data-parallel job makes it.
  auto store = c10::make_intrusive<c10d::FileStore>(rendezvous, world);
  auto gloo = c10d::ProcessGroupGloo::Options::create(timeout);
  gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  c10::intrusive_ptr<c10d::ProcessGroup> group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, gloo);

  torch::manual_seed(kModelSeed);
  Model model;
  std::vector<torch::Tensor> trainable;
  for (const torch::Tensor& p : model->parameters()) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  torch::optim::AdamW optimizer(trainable, torch::optim::AdamWOptions(3e-3).weight_decay(0.01));
  torch::manual_seed(kModelSeed + 1 + static_cast<uint64_t>(rank));  // dropout differs per rank

  trainsnap::DistributedOptions options;
  options.timeout = timeout;
  options.store.sync = true;
  auto opened = trainsnap::DistributedCheckpointer::Open(run_dir, group, options);
  if (!opened.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, opened.status().ToString().c_str());
    return 1;
  }
  trainsnap::DistributedCheckpointer& checkpointer = **opened;
  // The data order: rank r of N takes every N-th sample from the global
  // position; its state (epoch, global position) resumes on any world size.
  trainsnap::ResumableSampler sampler(kSamples, kDataSeed);
  trainsnap::Status distributed = sampler.Distribute(rank, world);
  if (!distributed.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, distributed.ToString().c_str());
    return 1;
  }
  trainsnap::TrainingState state;
  state.model = model.get();
  state.optimizer = &optimizer;
  state.extra["sampler"] = &sampler;

  int64_t first = 1;
  auto latest = checkpointer.RestoreLatest(state);  // every rank restores the same global step
  if (latest.ok()) {
    first = *latest + 1;
    if (rank == 0) {
      std::printf("rank 0: every rank of %d restored global step %lld (data position %zu of epoch %lld)\n", world,
                  static_cast<long long>(*latest), sampler.consumed(), static_cast<long long>(sampler.epoch()));
      std::fflush(stdout);
    }
    if (!restored_path.empty()) WriteState(restored_path, model, trainable, optimizer);
  } else if (latest.status().code() != trainsnap::StatusCode::kNotFound) {
    std::fprintf(stderr, "rank %d: %s\n", rank, latest.status().ToString().c_str());
    return 1;
  }
  sampler.reset();  // a fresh epoch, or the restored position

  for (int64_t step = first; step <= steps; ++step) {
    auto indices = sampler.next(kBatch);
    if (!indices.has_value()) {  // the epoch ended: the next one
      sampler.reset();
      indices = sampler.next(kBatch);
    }
    trainsnap::Status consumed = sampler.BatchConsumed();
    if (!consumed.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, consumed.ToString().c_str());
      return 1;
    }
    auto [x, y] = Batch(*indices);
    optimizer.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    // Gradient allreduce, flattened into one collective.
    std::vector<torch::Tensor> grads;
    for (const torch::Tensor& p : trainable) grads.push_back(p.grad().reshape(-1));
    std::vector<torch::Tensor> flat{torch::cat(grads).div_(world)};
    group->allreduce(flat)->wait();
    int64_t offset = 0;
    for (const torch::Tensor& p : trainable) {
      p.mutable_grad().copy_(flat[0].narrow(0, offset, p.numel()).view_as(p));
      offset += p.numel();
    }
    optimizer.step();
    // Returns once staged; the global commit runs in the background while
    // the next step trains. An error here (this step's staging, or the
    // previous step's global commit: the same on every rank) stops every
    // rank at this same step.
    auto handle = checkpointer.CaptureAsync(step, state);
    if (!handle.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, handle.status().ToString().c_str());
      return 1;
    }
    if (step == crash_at) raise(SIGKILL);
  }
  trainsnap::Status flushed = checkpointer.Flush();
  if (!flushed.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, flushed.ToString().c_str());
    return 1;
  }
  if (!final_path.empty()) WriteState(final_path, model, trainable, optimizer);
  if (rank == 0) {
    auto global = checkpointer.Steps();
    if (global.ok() && !global->empty()) {
      std::printf("rank 0: %zu global steps, the latest %lld, at %d ranks\n", global->size(),
                  static_cast<long long>(global->back()), world);
      std::fflush(stdout);
    }
  }
  return 0;
}

// --- the demo: a launcher that forks one process per rank --------------------

struct Ranks {
  std::vector<pid_t> pids;
  std::vector<int> codes;  // exit code, or -signal
};

// Every launch has a rendezvous file of its own: a killed launch leaves its
// file behind, holding addresses of processes that no longer exist.
Ranks Start(const std::string& self, const std::string& dir, const std::string& tag, int world, int64_t steps,
            int crash_rank, int64_t crash_at, const std::string& final_tag = "") {
  std::fflush(stdout);  // the children inherit the buffer otherwise
  static int launches = 0;
  const std::string rendezvous = dir + "/rendezvous-" + std::to_string(launches++);
  Ranks ranks;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args{
        self,           "rank",
        "--rank",       std::to_string(r),
        "--world",      std::to_string(world),
        "--run-dir",    dir + "/" + tag,
        "--rendezvous", rendezvous,
        "--steps",      std::to_string(steps),
        "--final",      dir + "/" + (final_tag.empty() ? tag : final_tag) + "-final-" + std::to_string(r),
        "--restored",   dir + "/" + (final_tag.empty() ? tag : final_tag) + "-restored-" + std::to_string(r)};
    if (r == crash_rank) {
      args.push_back("--crash-at");
      args.push_back(std::to_string(crash_at));
    }
    const pid_t pid = fork();
    if (pid == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    ranks.pids.push_back(pid);
  }
  return ranks;
}

// Waits for every rank; once one died of a signal, the rest get two seconds
// before they are killed too (what a launcher such as torchrun does).
void Wait(Ranks& ranks) {
  ranks.codes.assign(ranks.pids.size(), 0);
  std::vector<bool> done(ranks.pids.size(), false);
  std::optional<std::chrono::steady_clock::time_point> deadline;
  for (size_t left = ranks.pids.size(); left > 0;) {
    for (size_t r = 0; r < ranks.pids.size(); ++r) {
      int status = 0;
      if (done[r] || waitpid(ranks.pids[r], &status, WNOHANG) != ranks.pids[r]) continue;
      done[r] = true;
      --left;
      ranks.codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      if (ranks.codes[r] < 0 && !deadline) deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    }
    if (deadline && std::chrono::steady_clock::now() > *deadline) {
      for (size_t r = 0; r < ranks.pids.size(); ++r) {
        if (!done[r]) kill(ranks.pids[r], SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

int Demo(const std::string& self, const std::string& dir, int world, int64_t steps) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  const int victim = world - 1;
  const int64_t crash_at = steps / 2;
  std::printf("reference: %d ranks, %lld steps, never interrupted\n", world, static_cast<long long>(steps));
  Ranks reference = Start(self, dir, "reference", world, steps, -1, 0);
  Wait(reference);
  std::printf("run: rank %d SIGKILLs itself after staging step %lld\n", victim, static_cast<long long>(crash_at));
  Ranks killed = Start(self, dir, "run", world, steps, victim, crash_at);
  Wait(killed);
  std::printf("run: rank %d ended by signal %d; the others were stopped\n", victim, -killed.codes[victim]);
  std::printf("restart: every rank resumes\n");
  Ranks resumed = Start(self, dir, "run", world, steps, -1, 0);
  Wait(resumed);
  bool equal = true;
  for (int r = 0; r < world; ++r) {
    const std::string a = ReadFile(dir + "/reference-final-" + std::to_string(r));
    const std::string b = ReadFile(dir + "/run-final-" + std::to_string(r));
    const bool same = reference.codes[r] == 0 && resumed.codes[r] == 0 && !a.empty() && a == b;
    std::printf("rank %d: %zu bytes of final state, %s\n", r, b.size(),
                same ? "bitwise identical to the uninterrupted run" : "DIFFERENT");
    equal = equal && same;
  }
  std::printf(equal ? "OK: every rank resumed bitwise exactly\n" : "FAILED\n");
  return equal ? 0 : 1;
}

// N ranks train S/2 steps; M ranks restore the latest global step and train
// on to S. Each restored rank's state must be bitwise the one its home rank
// (itself, or r % N for a rank the N-rank run lacked) had at that step:
// parameters and optimizer state (replicated), and the RNG of ranks that
// existed (the others get a derived one, docs/distributed.md).
int Elastic(const std::string& self, const std::string& dir, int from, int to, int64_t steps) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  const int64_t half = steps / 2;
  std::printf("elastic: %d ranks train steps 1-%lld, a snapshot every step\n", from, static_cast<long long>(half));
  Ranks before = Start(self, dir, "run", from, half, -1, 0, "before");
  Wait(before);
  std::printf("elastic: %d ranks restore the latest global step and train on to step %lld\n", to,
              static_cast<long long>(steps));
  Ranks after = Start(self, dir, "run", to, steps, -1, 0, "after");
  Wait(after);
  bool ok = true;
  for (int r = 0; r < from; ++r) ok = ok && before.codes[r] == 0;
  for (int r = 0; r < to; ++r) {
    const std::string at_capture = ReadFile(dir + "/before-final-" + std::to_string(r < from ? r : r % from));
    const std::string restored = ReadFile(dir + "/after-restored-" + std::to_string(r));
    // Ranks the N-rank run lacked have a derived RNG: the rest must match.
    const size_t rng = at::detail::getDefaultCPUGenerator().get_state().nbytes();
    const size_t compared = r < from ? restored.size() : restored.size() - std::min(restored.size(), rng);
    const bool same = after.codes[r] == 0 && !restored.empty() && restored.size() == at_capture.size() &&
                      restored.compare(0, compared, at_capture, 0, compared) == 0;
    std::printf("rank %d of %d: restored %zu bytes of state, %s\n", r, to, restored.size(),
                same ? (r < from ? "bitwise that of the same rank at capture"
                                 : "bitwise that of its home rank at capture (RNG derived)")
                     : "DIFFERENT");
    ok = ok && same;
  }
  std::printf(ok ? "OK: the %d-rank run restored on %d ranks bitwise and trained on\n" : "FAILED\n", from, to);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"data-parallel fine-tune with trainsnap's DistributedCheckpointer"};
  app.require_subcommand(1);
  std::string dir, run_dir, rendezvous, final_path, restored_path;
  int ranks = 4, rank = 0, world = 1, from = 4, to = 2;
  int64_t steps = 24, crash_at = -1;
  CLI::App* demo = app.add_subcommand("demo", "reference run, a run with a killed rank, resume, bitwise proof");
  demo->add_option("dir", dir, "working directory")->required();
  demo->add_option("--ranks", ranks, "processes")->check(CLI::Range(1, 64));
  demo->add_option("--steps", steps, "optimizer steps")->check(CLI::Range(2, 1000000));
  CLI::App* elastic = app.add_subcommand("elastic", "train on N ranks, restore on M ranks, train on");
  elastic->add_option("dir", dir, "working directory")->required();
  elastic->add_option("--from", from, "ranks before the restore")->check(CLI::Range(1, 64));
  elastic->add_option("--to", to, "ranks after it")->check(CLI::Range(1, 64));
  elastic->add_option("--steps", steps, "optimizer steps in all")->check(CLI::Range(2, 1000000));
  CLI::App* one = app.add_subcommand("rank", "one rank of the job");
  one->add_option("--rank", rank)->required();
  one->add_option("--world", world)->required();
  one->add_option("--run-dir", run_dir)->required();
  one->add_option("--rendezvous", rendezvous)->required();
  one->add_option("--steps", steps);
  one->add_option("--crash-at", crash_at);
  one->add_option("--final", final_path);
  one->add_option("--restored", restored_path);
  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo) return Demo(fs::canonical("/proc/self/exe").string(), dir, ranks, steps);
    if (*elastic) return Elastic(fs::canonical("/proc/self/exe").string(), dir, from, to, steps);
    return RunRank(rank, world, run_dir, rendezvous, steps, crash_at, final_path, restored_path);
  } catch (const std::exception& e) {
    // Gloo reports a dead peer by throwing from the trainer's own collectives.
    const std::string what = e.what();  // the first line: c10::Error appends a backtrace
    std::fprintf(stderr, "rank %d stopped: %s\n", rank, what.substr(0, what.find('\n')).c_str());
    return 1;
  }
}
