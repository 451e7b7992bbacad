// finetune_lora: a small LoRA fine-tune on synthetic data that snapshots its
// whole training state into a trainsnap store after every micro-step, and a
// demo that SIGKILLs it mid-run, resumes it in a fresh process and proves the
// result bitwise identical to a run that never stopped.
//
//   finetune_lora demo DIR [--steps N]      the whole demo (scripts/demo.sh)
//   finetune_lora train [--store DIR] [--steps N] [--crash-at M] [--final FILE]
//       Trains N optimizer steps of 4 micro-steps. With --store, captures a
//       snapshot after every micro-step (step = micro-step index) and, if the
//       store already holds snapshots, resumes from the latest one. --crash-at
//       M: SIGKILLs itself once snapshot M is committed. --final: writes the
//       final training state (torch.save format, a dict of named tensors).
//   finetune_lora compare A B               bitwise comparison of two --final files
//   finetune_lora summary DIR               what the store holds and what it cost
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <CLI/CLI.hpp>
#include <torch/script.h>
#include <torch/torch.h>

#include "trainsnap/checkpointer.h"
#include "trainsnap/store.h"

namespace {

namespace fs = std::filesystem;
using trainsnap::Status;

// --- the model: a frozen "pretrained" base with trainable LoRA adapters ------

constexpr int64_t kDim = 256;
constexpr int64_t kLayers = 4;
constexpr int64_t kRank = 8;
constexpr double kLoraAlpha = 16.0;
constexpr double kDropout = 0.1;
constexpr int64_t kBatchSize = 32;
constexpr int64_t kWindowSize = 4;  // micro-steps per optimizer step
// The base stands in for downloaded weights: always the same.
constexpr uint64_t kBaseSeed = 2024;
constexpr uint64_t kAdapterSeed = 7;
constexpr uint64_t kTrainSeed = 11;
constexpr uint64_t kDataSeed = 0xda7a;
constexpr const char* kBaseLabel = "synthetic-base-256x4 (seed 2024)";

at::Generator Seeded(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

class LoraLinearImpl : public torch::nn::Module {
 public:
  LoraLinearImpl(int64_t dim, uint64_t base_seed, uint64_t adapter_seed) {
    at::Generator base = Seeded(base_seed), adapter = Seeded(adapter_seed);
    const double fan_in = std::sqrt(static_cast<double>(dim));
    weight_ = register_parameter("weight", torch::randn({dim, dim}, base) / fan_in, /*requires_grad=*/false);
    bias_ = register_parameter("bias", torch::randn({dim}, base) * 0.02, /*requires_grad=*/false);
    lora_a_ = register_parameter("lora_a", torch::randn({kRank, dim}, adapter) / fan_in);
    lora_b_ = register_parameter("lora_b", torch::zeros({dim, kRank}));  // LoRA starts at the base model
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor delta = torch::linear(torch::linear(torch::dropout(x, kDropout, is_training()), lora_a_), lora_b_);
    return torch::linear(x, weight_, bias_) + delta * (kLoraAlpha / kRank);
  }

 private:
  torch::Tensor weight_, bias_, lora_a_, lora_b_;
};
TORCH_MODULE(LoraLinear);

class LoraModelImpl : public torch::nn::Module {
 public:
  LoraModelImpl() {
    for (int64_t i = 0; i < kLayers; ++i) {
      layers_->push_back(LoraLinear(kDim, kBaseSeed + i, kAdapterSeed * 100 + i));
    }
    register_module("layers", layers_);
  }
  torch::Tensor forward(torch::Tensor x) {
    for (size_t i = 0; i < layers_->size(); ++i) {
      x = layers_[i]->as<LoraLinear>()->forward(x);
      if (i + 1 < layers_->size()) x = torch::gelu(x);
    }
    return x;
  }

 private:
  torch::nn::ModuleList layers_;
};
TORCH_MODULE(LoraModel);

// --- data: batch i is a pure function of i; the cursor is the only state -----

class DataCursor : public trainsnap::Stateful {
 public:
  int64_t position = 0;
  std::string SaveState() const override { return std::to_string(position); }
  Status LoadState(std::string_view bytes) override {
    try {
      position = std::stoll(std::string(bytes));
    } catch (const std::exception&) {
      return Status::Corruption("data cursor: not a number: `" + std::string(bytes) + "`");
    }
    return Status::OK();
  }
};

struct Batch {
  torch::Tensor x, y;
  double weight;  // e.g. the number of real tokens in the batch
};

Batch MakeBatch(int64_t position) {
  // Its own generator: the default one drives dropout only.
  at::Generator gen = Seeded(kDataSeed * 1000003 + static_cast<uint64_t>(position));
  Batch b;
  b.x = torch::randn({kBatchSize, kDim}, gen);
  b.y = torch::sin(b.x.roll(1, 1) * 1.3) + torch::randn({kBatchSize, kDim}, gen) * 0.05;
  b.weight = static_cast<double>(8 + (position * 5) % 9);
  return b;
}

// --- the training loop -------------------------------------------------------

struct Trainer {
  LoraModel model;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::unique_ptr<torch::optim::StepLR> scheduler;
  trainsnap::AccumulationWindow window;
  DataCursor cursor;

  Trainer() {
    std::vector<torch::Tensor> trainable;
    for (auto& p : model->parameters()) {
      if (p.requires_grad()) trainable.push_back(p);
    }
    optimizer = std::make_unique<torch::optim::AdamW>(trainable, torch::optim::AdamWOptions(2e-3).weight_decay(0.01));
    scheduler = std::make_unique<torch::optim::StepLR>(*optimizer, /*step_size=*/10, /*gamma=*/0.5);
    window.size = kWindowSize;
  }

  trainsnap::TrainingState View() {
    trainsnap::TrainingState state;
    state.model = model.ptr().get();
    state.optimizer = optimizer.get();
    state.scheduler = scheduler.get();
    state.accumulation = &window;
    state.extra["data_cursor"] = &cursor;
    return state;  // rng = true: the default CPU generator is captured too
  }

  // One micro-step of weighted gradient accumulation; steps the optimizer at
  // the end of a window. Returns the micro-step's loss.
  double MicroStep() {
    if (window.micro_step == 0) {
      optimizer->zero_grad();
      window.weight_sum = 0.0;
      window.scale = 1024.0;  // a static loss scale
    }
    Batch batch = MakeBatch(cursor.position);
    model->train();
    torch::Tensor loss = torch::mse_loss(model->forward(batch.x), batch.y);
    (loss * (batch.weight * window.scale)).backward();
    window.weight_sum += batch.weight;
    ++window.micro_step;
    ++cursor.position;
    if (window.micro_step == window.size) {
      torch::NoGradGuard no_grad;
      for (auto& p : optimizer->param_groups()[0].params()) p.mutable_grad().div_(window.weight_sum * window.scale);
      optimizer->step();
      scheduler->step();
      window.micro_step = 0;
    }
    return loss.item<double>();
  }
};

// Reads LRScheduler's protected step count without changing the class.
struct SchedulerStepCount : torch::optim::LRScheduler {
  static unsigned Get(const torch::optim::LRScheduler& s) { return s.*(&SchedulerStepCount::step_count_); }
};

// Everything that determines where training stands, as named tensors: every
// parameter (the frozen base too), gradient, AdamW state tensor and step,
// learning rate, scheduler step, window, data cursor and the RNG state.
c10::Dict<std::string, at::Tensor> TrainingStateTensors(Trainer& t) {
  c10::Dict<std::string, at::Tensor> out;
  const auto& state = t.optimizer->state();
  for (const auto& item : t.model->named_parameters()) {
    const torch::Tensor& p = item.value();
    out.insert("param/" + item.key(), p.detach().clone());
    if (!p.requires_grad()) continue;
    if (p.grad().defined()) out.insert("grad/" + item.key(), p.grad().clone());
    auto it = state.find(c10::guts::to_string(p.unsafeGetTensorImpl()));
    if (it == state.end()) continue;
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    out.insert("adamw/" + item.key() + "/step", torch::scalar_tensor(s.step(), torch::kInt64));
    out.insert("adamw/" + item.key() + "/exp_avg", s.exp_avg().clone());
    out.insert("adamw/" + item.key() + "/exp_avg_sq", s.exp_avg_sq().clone());
  }
  out.insert("lr", torch::scalar_tensor(t.optimizer->param_groups()[0].options().get_lr(), torch::kFloat64));
  out.insert("scheduler/step_count", torch::scalar_tensor(int64_t{SchedulerStepCount::Get(*t.scheduler)}, torch::kInt64));
  out.insert("window/micro_step", torch::scalar_tensor(t.window.micro_step, torch::kInt64));
  out.insert("window/weight_sum", torch::scalar_tensor(t.window.weight_sum, torch::kFloat64));
  out.insert("window/scale", torch::scalar_tensor(t.window.scale, torch::kFloat64));
  out.insert("cursor/position", torch::scalar_tensor(t.cursor.position, torch::kInt64));
  out.insert("rng/cpu", at::detail::getDefaultCPUGenerator().get_state());
  return out;
}

// --- small helpers -------------------------------------------------------------

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

std::string Bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 3) bytes /= 1024.0, ++u;
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

bool WriteFile(const std::string& path, const std::vector<char>& data) {
  std::ofstream f(path, std::ios::binary);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  return static_cast<bool>(f);
}

std::optional<std::vector<char>> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "finetune_lora: %s\n", what.c_str());
  return 1;
}

// --- train -------------------------------------------------------------------

struct TrainOptions {
  std::string store;  // empty: no snapshots (the reference run)
  int64_t steps = 40;
  int64_t crash_at = -1;
  std::string final_path;
  int progress_fd = -1;  // demo: 8 bytes per committed snapshot
  std::string label = "train";
};

int Train(const TrainOptions& o) {
  // Bit-exactness across processes needs the same reduction order: pin the
  // intra-op thread count (results of a parallel sum depend on it).
  torch::set_num_threads(1);
  const char* tag = o.label.c_str();
  const int64_t total = o.steps * kWindowSize;
  std::unique_ptr<trainsnap::Store> store;
  std::unique_ptr<trainsnap::Checkpointer> checkpointer;
  Trainer trainer;
  if (!o.store.empty()) {
    auto opened = trainsnap::Store::Open(o.store);
    if (!opened.ok()) return Fail("open store " + o.store + ": " + opened.status().ToString());
    store = std::move(*opened);
    trainsnap::CheckpointerOptions copts;
    copts.base_label = kBaseLabel;
    copts.hash_base_content = true;  // never restore adapters onto another base
    checkpointer = std::make_unique<trainsnap::Checkpointer>(*store, copts);
    // A fresh process: whatever the RNG and the adapters hold now, the
    // snapshot (if any) replaces it.
    torch::manual_seed(std::random_device{}());
    auto start = std::chrono::steady_clock::now();
    trainsnap::Result<int64_t> restored = checkpointer->RestoreLatest(trainer.View());
    if (!restored.ok() && restored.status().code() != trainsnap::StatusCode::kNotFound) {
      return Fail("restore: " + restored.status().ToString());
    }
    if (restored.ok()) {
      std::printf("[%s] restored snapshot %lld in %.1f ms: optimizer step %lld, micro-step %lld/%lld of the "
                  "window, lr %.3g, data cursor %lld\n",
                  tag, static_cast<long long>(*restored), MillisSince(start),
                  static_cast<long long>(SchedulerStepCount::Get(*trainer.scheduler)),
                  static_cast<long long>(trainer.window.micro_step), static_cast<long long>(kWindowSize),
                  trainer.optimizer->param_groups()[0].options().get_lr(),
                  static_cast<long long>(trainer.cursor.position));
      if (trainer.cursor.position != *restored + 1) return Fail("restored cursor does not follow the snapshot step");
    }
  }
  if (trainer.cursor.position == 0) torch::manual_seed(kTrainSeed);

  double capture_ms = 0.0;
  int64_t captures = 0;
  while (trainer.cursor.position < total) {
    const int64_t step = trainer.cursor.position;
    const double loss = trainer.MicroStep();
    if (checkpointer) {
      auto start = std::chrono::steady_clock::now();
      Status s = checkpointer->Capture(step, trainer.View());
      if (!s.ok()) return Fail("capture micro-step " + std::to_string(step) + ": " + s.ToString());
      capture_ms += MillisSince(start);
      ++captures;
      if (o.progress_fd >= 0 && ::write(o.progress_fd, &step, sizeof(step)) != sizeof(step)) {
        return Fail("progress pipe: " + std::string(std::strerror(errno)));
      }
    }
    if ((step + 1) % (5 * kWindowSize) == 0 || step + 1 == total) {
      char capture_note[64] = "";
      if (captures > 0) std::snprintf(capture_note, sizeof(capture_note), "  capture %.2f ms avg", capture_ms / captures);
      std::printf("[%s] micro-step %4lld  optimizer step %3lld/%lld  loss %.6f  lr %.3g%s\n", tag,
                  static_cast<long long>(step), static_cast<long long>((step + 1) / kWindowSize),
                  static_cast<long long>(o.steps), loss, trainer.optimizer->param_groups()[0].options().get_lr(),
                  capture_note);
      std::fflush(stdout);
    }
    if (step == o.crash_at) {
      std::printf("[%s] simulated crash: SIGKILL right after snapshot %lld\n", tag, static_cast<long long>(step));
      std::fflush(stdout);
      ::raise(SIGKILL);
    }
  }
  if (!o.final_path.empty()) {
    if (!WriteFile(o.final_path, torch::pickle_save(c10::IValue(TrainingStateTensors(trainer))))) {
      return Fail("cannot write " + o.final_path);
    }
    std::printf("[%s] final training state written to %s\n", tag, o.final_path.c_str());
  }
  return 0;
}

// --- compare -----------------------------------------------------------------

int Compare(const std::string& a_path, const std::string& b_path) {
  auto a_bytes = ReadFile(a_path), b_bytes = ReadFile(b_path);
  if (!a_bytes || !b_bytes) return Fail("cannot read " + (a_bytes ? b_path : a_path));
  auto a = torch::pickle_load(*a_bytes).toGenericDict();
  auto b = torch::pickle_load(*b_bytes).toGenericDict();
  int64_t tensors = 0, bytes = 0;
  std::vector<std::string> differing;
  for (const auto& entry : a) {
    const std::string& name = entry.key().toStringRef();
    ++tensors;
    auto other = b.find(entry.key());
    if (other == b.end()) {
      differing.push_back(name + " (missing)");
      continue;
    }
    torch::Tensor x = entry.value().toTensor().contiguous(), y = other->value().toTensor().contiguous();
    bytes += static_cast<int64_t>(x.nbytes());
    if (x.scalar_type() != y.scalar_type() || x.sizes() != y.sizes() ||
        std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0) {
      differing.push_back(name);
    }
  }
  if (b.size() != a.size()) differing.push_back("entry count " + std::to_string(b.size()) + " vs " + std::to_string(a.size()));
  std::printf("compared %lld tensors, %lld bytes: parameters, gradients, AdamW state, lr, scheduler, "
              "accumulation window, data cursor, RNG state\n",
              static_cast<long long>(tensors), static_cast<long long>(bytes));
  if (differing.empty()) {
    std::printf("bitwise identical: yes (%lld tensors, %lld bytes)\n", static_cast<long long>(tensors),
                static_cast<long long>(bytes));
    return 0;
  }
  for (size_t i = 0; i < differing.size() && i < 20; ++i) std::printf("  differs: %s\n", differing[i].c_str());
  std::printf("bitwise identical: NO (%zu of %lld tensors differ)\n", differing.size(),
              static_cast<long long>(tensors));
  return 1;
}

// --- summary -----------------------------------------------------------------

int Summary(const std::string& store_path) {
  auto opened = trainsnap::Store::OpenReadOnly(store_path);
  if (!opened.ok()) return Fail("open " + store_path + ": " + opened.status().ToString());
  trainsnap::Store& store = **opened;
  auto list = store.List();
  if (!list.ok()) return Fail("list: " + list.status().ToString());
  if (list->empty()) return Fail("the store holds no snapshot");
  uint64_t logical = 0, referenced = 0, fresh = 0, mid_new = 0, end_new = 0;
  int64_t mid_count = 0, end_count = 0;
  for (const auto& info : *list) {
    logical += info.logical_bytes;
    referenced += info.stored_bytes;
    fresh += info.new_bytes;
    if (info.step == list->front().step) continue;  // the first one writes everything
    const bool window_end = (info.step + 1) % kWindowSize == 0;
    (window_end ? end_new : mid_new) += info.new_bytes;
    ++(window_end ? end_count : mid_count);
  }
  const double n = static_cast<double>(list->size());
  std::printf("store %s\n", store_path.c_str());
  std::printf("  snapshots:         %zu (micro-steps %lld..%lld)\n", list->size(),
              static_cast<long long>(list->front().step), static_cast<long long>(list->back().step));
  std::printf("  logical bytes:     %s in all, %s per snapshot (adapters, gradients, AdamW state, RNG, ...)\n",
              Bytes(static_cast<double>(logical)).c_str(), Bytes(logical / n).c_str());
  std::printf("  new bytes written: %s in all, %s per snapshot on average (%.1fx less than logical)\n",
              Bytes(static_cast<double>(fresh)).c_str(), Bytes(fresh / n).c_str(),
              fresh > 0 ? static_cast<double>(logical) / static_cast<double>(fresh) : 0.0);
  std::printf("  first snapshot:    %s new\n", Bytes(static_cast<double>(list->front().new_bytes)).c_str());
  if (mid_count > 0) {
    std::printf("  mid-window:        %s new per snapshot (only gradients and small state change)\n",
                Bytes(static_cast<double>(mid_new) / static_cast<double>(mid_count)).c_str());
  }
  if (end_count > 0) {
    std::printf("  window end:        %s new per snapshot (optimizer step: adapters and AdamW state change)\n",
                Bytes(static_cast<double>(end_new) / static_cast<double>(end_count)).c_str());
  }
  auto stats = store.Stats();
  if (stats.ok()) {
    std::printf("  distinct chunks:   %llu, %s encoded (%s raw); files: %s SST, %s packs, %s WAL\n",
                static_cast<unsigned long long>(stats->chunks), Bytes(static_cast<double>(stats->chunk_stored_bytes)).c_str(),
                Bytes(static_cast<double>(stats->chunk_raw_bytes)).c_str(), Bytes(static_cast<double>(stats->sst_bytes)).c_str(),
                Bytes(static_cast<double>(stats->pack_bytes)).c_str(), Bytes(static_cast<double>(stats->wal_bytes)).c_str());
  } else {
    std::printf("  (stats unavailable: %s)\n", stats.status().ToString().c_str());
  }

  // The peer: torch.save of the same state, once per snapshot. Restore the
  // latest snapshot into fresh objects and serialize what it holds.
  torch::set_num_threads(1);
  Trainer trainer;
  trainsnap::CheckpointerOptions copts;
  copts.base_label = kBaseLabel;
  copts.hash_base_content = true;
  trainsnap::Checkpointer checkpointer(store, copts);
  trainsnap::Result<int64_t> restored = checkpointer.RestoreLatest(trainer.View());
  if (!restored.ok()) return Fail("restore latest for the torch.save comparison: " + restored.status().ToString());
  c10::Dict<std::string, at::Tensor> same_state = TrainingStateTensors(trainer);
  for (const auto& item : trainer.model->named_parameters()) {
    // trainsnap keeps the frozen base out of a LoRA snapshot; so does the peer.
    if (!item.value().requires_grad()) (void)same_state.erase("param/" + item.key());
  }
  const double torch_save = static_cast<double>(torch::pickle_save(c10::IValue(same_state)).size());
  std::printf("  torch.save of the same state: %s per snapshot, %s for %zu snapshots: trainsnap writes %.1fx less\n",
              Bytes(torch_save).c_str(), Bytes(torch_save * n).c_str(), list->size(),
              fresh > 0 ? torch_save * n / static_cast<double>(fresh) : 0.0);
  return 0;
}

// --- demo ----------------------------------------------------------------------

// Starts this binary again with `args` (fork + exec: a fresh process, as after
// a real crash). `keep_fd` stays open in the child.
pid_t Spawn(std::vector<std::string> args, int keep_fd = -1) {
  std::error_code ec;
  std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  args.insert(args.begin(), self);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  pid_t pid = ::fork();
  if (pid == 0) {
    if (keep_fd >= 0) ::fcntl(keep_fd, F_SETFD, 0);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

int WaitExitCode(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int Demo(const std::string& dir, int64_t steps) {
  const auto demo_start = std::chrono::steady_clock::now();
  const std::string store = dir + "/store", reference = dir + "/reference.pt", resumed = dir + "/resumed.pt";
  std::error_code ec;
  fs::create_directories(dir, ec);
  for (const auto& p : {store, reference, resumed}) fs::remove_all(p, ec);
  const int64_t total = steps * kWindowSize;
  // Kill 60% of the way in, on the second micro-step of a window: the
  // snapshot to resume from holds a half-accumulated gradient.
  const int64_t kill_at = (total * 3 / 5) / kWindowSize * kWindowSize + 1;
  const std::string steps_arg = std::to_string(steps);

  std::printf("== 1/4  reference: %lld optimizer steps x %lld micro-steps, uninterrupted, no snapshots\n",
              static_cast<long long>(steps), static_cast<long long>(kWindowSize));
  if (int rc = WaitExitCode(Spawn({"train", "--steps", steps_arg, "--final", reference, "--label", "reference"}));
      rc != 0) {
    return Fail("reference run failed with exit code " + std::to_string(rc));
  }

  std::printf("== 2/4  training with a snapshot after every micro-step; kill -9 at micro-step %lld (mid-window)\n",
              static_cast<long long>(kill_at));
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Fail("pipe2: " + std::string(std::strerror(errno)));
  pid_t pid = Spawn({"train", "--store", store, "--steps", steps_arg, "--progress-fd", std::to_string(fds[1]),
                     "--label", "training"},
                    fds[1]);
  ::close(fds[1]);
  int64_t last_reported = -1;
  bool killed = false;
  for (;;) {
    int64_t step;
    ssize_t n = ::read(fds[0], &step, sizeof(step));  // 8-byte pipe writes are atomic
    if (n < 0 && errno == EINTR) continue;
    if (n != sizeof(step)) break;
    last_reported = step;
    if (!killed && step >= kill_at) {
      ::kill(pid, SIGKILL);
      killed = true;
      std::printf("[demo] sent SIGKILL to training process %d after it reported snapshot %lld committed\n",
                  static_cast<int>(pid), static_cast<long long>(step));
    }
  }
  ::close(fds[0]);
  const int rc = WaitExitCode(pid);
  if (rc != 128 + SIGKILL) return Fail("the training process was not killed (exit code " + std::to_string(rc) + ")");
  std::printf("[demo] training process died of SIGKILL; last snapshot it reported: %lld of %lld (a capture in "
              "flight at the kill is wholly in the store or not at all)\n",
              static_cast<long long>(last_reported), static_cast<long long>(total - 1));

  std::printf("== 3/4  resume: a fresh process restores the latest snapshot and finishes the run\n");
  if (int rc2 = WaitExitCode(
          Spawn({"train", "--store", store, "--steps", steps_arg, "--final", resumed, "--label", "resumed"}));
      rc2 != 0) {
    return Fail("resumed run failed with exit code " + std::to_string(rc2));
  }

  std::printf("== 4/4  proof: resumed run vs uninterrupted reference\n");
  std::fflush(stdout);
  const int compared = Compare(reference, resumed);
  std::printf("\n");
  const int summarized = Summary(store);
  std::printf("demo finished in %.1f s\n", MillisSince(demo_start) / 1000.0);
  return compared != 0 ? compared : summarized;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"finetune_lora: a LoRA fine-tune that snapshots every micro-step into a trainsnap store"};
  app.require_subcommand(1);

  TrainOptions train;
  auto* train_cmd = app.add_subcommand("train", "train; with --store, snapshot every micro-step and resume");
  train_cmd->add_option("--store", train.store, "store directory (none: no snapshots, the reference run)");
  train_cmd->add_option("--steps", train.steps, "optimizer steps (x4 micro-steps)")->check(CLI::PositiveNumber);
  train_cmd->add_option("--crash-at", train.crash_at, "SIGKILL this process after snapshot M is committed");
  train_cmd->add_option("--final", train.final_path, "write the final training state here (torch.save format)");
  train_cmd->add_option("--progress-fd", train.progress_fd, "write each committed step (8 bytes) to this fd");
  train_cmd->add_option("--label", train.label, "prefix of progress lines");

  std::string demo_dir;
  int64_t demo_steps = 40;
  auto* demo_cmd = app.add_subcommand("demo", "reference run, kill -9 mid-run, resume, bitwise proof, store summary");
  demo_cmd->add_option("dir", demo_dir, "working directory (its store/, reference.pt, resumed.pt are replaced)")
      ->required();
  demo_cmd->add_option("--steps", demo_steps, "optimizer steps (x4 micro-steps)")->check(CLI::Range(2, 100000));

  std::string compare_a, compare_b;
  auto* compare_cmd = app.add_subcommand("compare", "bitwise comparison of two --final files");
  compare_cmd->add_option("a", compare_a)->required();
  compare_cmd->add_option("b", compare_b)->required();

  std::string summary_dir;
  auto* summary_cmd = app.add_subcommand("summary", "what a store holds and what it cost");
  summary_cmd->add_option("dir", summary_dir)->required();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*train_cmd) return Train(train);
    if (*demo_cmd) return Demo(demo_dir, demo_steps);
    if (*compare_cmd) return Compare(compare_a, compare_b);
    if (*summary_cmd) return Summary(summary_dir);
  } catch (const std::exception& e) {
    return Fail(e.what());
  }
  return 1;
}
