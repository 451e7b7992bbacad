// many_tensors_bench: capture, stall and restore of a state made of many
// small tensors, against torch::save / torch::load of the
// same tensors in the same run. For each count N: one module with N
// parameters of `floats` float32 each and an Adam optimizer after one step
// (state: exp_avg, exp_avg_sq), so a snapshot holds 3N tensors.
//   capture  -- Checkpointer::Capture (stage, encode, commit);
//   stall    -- Checkpointer::CaptureAsync on the calling thread (then Wait);
//   restore  -- Checkpointer::Restore into a second module + optimizer;
//   save / load -- torch::save / torch::load of the same 3N tensors;
//   manifest -- SnapshotInfo::manifest_bytes of a snapshot (what each one repeats);
//   cpu      -- CPU time of capture and restore (all threads) and of the stall
//               (calling thread): comparable on a machine shared with other work;
//   new      -- SnapshotInfo::new_bytes of each CaptureAsync snapshot (chunk
//               bytes it wrote: deltas against the previous one).
// --settle-heap: before each timed call, one malloc/free of 4 KiB on the
// calling thread (SettleHeap below), so that the figures are trainsnap's own
// work and not glibc merging the chunks the training step just freed.
// Medians of `runs` repetitions. Prints a table and the ratios the issue
// asks for (50k / 5k, restore / torch::load); writes JSON with --json.
// Usage: many_tensors_bench [--counts 5000,10000,20000,50000] [--floats 64]
//                           [--runs 3] [--dir /tmp/many_tensors_bench] [--json out.json]
//                           [--worker-nice 0]
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "trainsnap/checkpointer.h"
#include "trainsnap/store.h"

namespace {

using Clock = std::chrono::steady_clock;
using trainsnap::Checkpointer;
using trainsnap::Status;
using trainsnap::Store;
using trainsnap::TrainingState;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

struct Net {
  std::shared_ptr<torch::nn::Module> module = std::make_shared<torch::nn::Module>();
  std::unique_ptr<torch::optim::Adam> optimizer;
  Net(int64_t count, int64_t floats) {
    std::vector<torch::Tensor> params;
    params.reserve(count);
    for (int64_t i = 0; i < count; ++i) {
      params.push_back(module->register_parameter("p" + std::to_string(i), torch::randn({floats})));
    }
    optimizer = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-3));
  }
  // One optimizer step with a gradient of ones: every tensor changes.
  void Step() {
    for (auto& p : module->parameters()) p.mutable_grad() = torch::ones_like(p);
    optimizer->step();
    optimizer->zero_grad();
  }
  TrainingState State() {
    TrainingState state;
    state.model = module.get();
    state.optimizer = optimizer.get();
    state.rng = false;
    return state;
  }
  // The same tensors torch::save writes: parameters, exp_avg, exp_avg_sq.
  std::vector<torch::Tensor> Tensors() {
    std::vector<torch::Tensor> out;
    for (auto& p : module->parameters()) {
      out.push_back(p);
      auto& state = static_cast<torch::optim::AdamParamState&>(
          *optimizer->state().at(c10::guts::to_string(p.unsafeGetTensorImpl())));
      out.push_back(state.exp_avg());
      out.push_back(state.exp_avg_sq());
    }
    return out;
  }
};

// CPU seconds of the whole process (every thread) and of the calling thread:
// what the work cost, whatever else the machine runs (wall times on a shared
// machine include other processes' time slices).
double ProcessCpu() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}
double ThreadCpu() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

// glibc keeps freed small chunks in "fast bins" and merges them all at the
// next allocation of 1 KiB or more on that arena (malloc_consolidate). An
// optimizer step over N tiny tensors frees several chunks per parameter and
// allocates nothing that large, so without this the first such allocation
// inside the timed call pays for merging the step's garbage: at 50,000
// parameters about 170 ms of a 410 ms stall, scattered over 100+ MB, while at
// 5,000 it is cheap (bench/README.md, "Session 10"). A training step with
// any tensor of 1 KiB or more settles the heap itself.
void SettleHeap() {
  void* p = std::malloc(4096);
  asm volatile("" : : "r"(p) : "memory");  // keep the pair
  std::free(p);
}

struct Figures {
  int64_t count = 0;
  double capture = 0, stall = 0, restore = 0, save = 0, load = 0;
  // CPU seconds: capture and restore in all threads, stall on the caller's.
  double capture_cpu = 0, stall_cpu = 0, restore_cpu = 0;
  uint64_t manifest_bytes = 0, logical_bytes = 0, tensors = 0;
  double new_bytes = 0;  // median over runs
};

Figures Measure(int64_t count, int64_t floats, int runs, int worker_nice, bool peer, bool settle,
                const std::filesystem::path& dir) {
  auto settle_heap = [settle] {
    if (settle) SettleHeap();
  };
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  trainsnap::StoreOptions options;
  options.sync = false;  // the figures are CPU work, not fsync latency
  options.worker_nice = worker_nice;
  auto opened = Store::Open((dir / "store").string(), options);
  Check(opened.status(), "open");
  std::unique_ptr<Store> store = std::move(opened).value();
  torch::manual_seed(1);
  Net net(count, floats);
  net.Step();
  Net target(count, floats);
  target.Step();

  Figures f;
  f.count = count;
  std::vector<double> capture, stall, restore, save, load, new_bytes, capture_cpu, stall_cpu, restore_cpu;
  Checkpointer checkpointer(*store);
  int64_t step = 0;
  for (int run = 0; run < runs; ++run) {
    net.Step();
    settle_heap();
    auto a = Clock::now();
    double cpu = ProcessCpu();
    Check(checkpointer.Capture(++step, net.State()), "capture");
    capture.push_back(Seconds(a, Clock::now()));
    capture_cpu.push_back(ProcessCpu() - cpu);

    net.Step();
    settle_heap();
    a = Clock::now();
    cpu = ThreadCpu();
    auto handle = checkpointer.CaptureAsync(++step, net.State());
    stall.push_back(Seconds(a, Clock::now()));
    stall_cpu.push_back(ThreadCpu() - cpu);
    Check(handle.status(), "capture async");
    Check(handle->Wait(), "capture async wait");
    auto written = store->Info(step);
    Check(written.status(), "info");
    new_bytes.push_back(static_cast<double>(written->new_bytes));

    settle_heap();
    a = Clock::now();
    cpu = ProcessCpu();
    Check(checkpointer.Restore(step, target.State()), "restore");
    restore.push_back(Seconds(a, Clock::now()));
    restore_cpu.push_back(ProcessCpu() - cpu);

    if (!peer) continue;
    const std::string file = (dir / "tensors.pt").string();
    std::vector<torch::Tensor> tensors = net.Tensors();
    settle_heap();
    a = Clock::now();
    torch::save(tensors, file);
    save.push_back(Seconds(a, Clock::now()));
    std::vector<torch::Tensor> loaded;
    settle_heap();
    a = Clock::now();
    torch::load(loaded, file);
    load.push_back(Seconds(a, Clock::now()));
    if (loaded.size() != tensors.size()) std::abort();
  }
  auto info = store->Info(step);
  Check(info.status(), "info");
  f.manifest_bytes = info->manifest_bytes;
  f.logical_bytes = info->logical_bytes;
  f.tensors = info->tensors;
  f.capture = Median(capture);
  f.stall = Median(stall);
  f.restore = Median(restore);
  f.capture_cpu = Median(capture_cpu);
  f.stall_cpu = Median(stall_cpu);
  f.restore_cpu = Median(restore_cpu);
  f.save = peer ? Median(save) : 0;
  f.load = peer ? Median(load) : 0;
  f.new_bytes = Median(new_bytes);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> counts = {5000, 10000, 20000, 50000};
  int64_t floats = 64;
  int runs = 3;
  std::string dir_arg = "/tmp/many_tensors_bench";
  std::string json_path;
  // Not the store's default (19): on a machine shared with other work at
  // nice 0, workers at 19 get almost no CPU and Capture/Restore measure the
  // scheduler instead of the code.
  int worker_nice = 0;
  bool skip_peer = false;
  bool settle = false;
  CLI::App app{"many_tensors_bench: many small tensors against torch::save/torch::load (bench/README.md)"};
  app.add_option("--counts", counts, "parameter counts (each with 2 Adam state tensors)")->delimiter(',');
  app.add_option("--floats", floats, "float32 elements per tensor")->check(CLI::PositiveNumber);
  app.add_option("--runs", runs, "repetitions per count (medians are reported)")->check(CLI::PositiveNumber);
  app.add_option("--dir", dir_arg, "scratch directory (removed at the end)");
  app.add_option("--json", json_path, "write the figures as JSON to this file");
  app.add_option("--worker-nice", worker_nice, "StoreOptions::worker_nice")->check(CLI::Range(0, 19));
  app.add_flag("--skip-peer", skip_peer,
               "leave out torch::save/torch::load (minutes at 50k): for profiling; the ratios to the peer are then 0");
  app.add_flag("--settle-heap", settle,
               "one malloc/free of 4 KiB before each timed call: time trainsnap's work, not glibc merging the "
               "chunks the optimizer step freed (see SettleHeap)");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);

  std::vector<Figures> all;
  std::printf("%8s %8s %10s %10s %10s %10s %10s %9s %12s %12s   %s\n", "params", "tensors", "capture", "stall",
              "restore", "save", "load", "rest/load", "manifest", "new", "cpu: capture stall restore");
  for (int64_t count : counts) {
    Figures f = Measure(count, floats, runs, worker_nice, !skip_peer, settle, dir_arg);
    std::printf("%8lld %8llu %8.1fms %8.1fms %8.1fms %8.1fms %8.1fms %8.2fx %10.1fkB %10.1fkB   %.0f %.0f %.0f ms\n",
                static_cast<long long>(count), static_cast<unsigned long long>(f.tensors), f.capture * 1e3,
                f.stall * 1e3, f.restore * 1e3, f.save * 1e3, f.load * 1e3, f.load > 0 ? f.restore / f.load : 0.0,
                f.manifest_bytes / 1e3, f.new_bytes / 1e3, f.capture_cpu * 1e3, f.stall_cpu * 1e3, f.restore_cpu * 1e3);
    std::fflush(stdout);
    all.push_back(f);
  }
  std::filesystem::remove_all(dir_arg);

  nlohmann::json out;
  out["bench"] = "many_tensors_bench";
  out["floats_per_tensor"] = floats;
  out["runs"] = runs;
  out["worker_nice"] = worker_nice;
  out["settle_heap"] = settle;
  for (const Figures& f : all) {
    out["results"].push_back({{"params", f.count},
                              {"tensors", f.tensors},
                              {"logical_bytes", f.logical_bytes},
                              {"manifest_bytes", f.manifest_bytes},
                              {"new_bytes", f.new_bytes},
                              {"capture_s", f.capture},
                              {"stall_s", f.stall},
                              {"restore_s", f.restore},
                              {"capture_cpu_s", f.capture_cpu},
                              {"stall_cpu_s", f.stall_cpu},
                              {"restore_cpu_s", f.restore_cpu},
                              {"torch_save_s", f.save},
                              {"torch_load_s", f.load},
                              {"restore_over_torch_load", f.load > 0 ? f.restore / f.load : 0.0}});
  }
  if (all.size() >= 2) {
    const Figures& first = all.front();
    const Figures& last = all.back();
    const double scale = static_cast<double>(last.count) / static_cast<double>(first.count);
    out["scaling"] = {{"count_ratio", scale},
                      {"capture_ratio", last.capture / first.capture},
                      {"stall_ratio", last.stall / first.stall},
                      {"restore_ratio", last.restore / first.restore},
                      {"capture_cpu_ratio", last.capture_cpu / first.capture_cpu},
                      {"stall_cpu_ratio", last.stall_cpu / first.stall_cpu},
                      {"restore_cpu_ratio", last.restore_cpu / first.restore_cpu}};
    std::printf("%lld -> %lld params (%.0fx): capture %.1fx, stall %.1fx, restore %.1fx (CPU time: %.1fx, %.1fx, "
                "%.1fx); restore / torch::load at %lld: %.2fx\n",
                static_cast<long long>(first.count), static_cast<long long>(last.count), scale,
                last.capture / first.capture, last.stall / first.stall, last.restore / first.restore,
                last.capture_cpu / first.capture_cpu, last.stall_cpu / first.stall_cpu,
                last.restore_cpu / first.restore_cpu,
                static_cast<long long>(last.count), last.load > 0 ? last.restore / last.load : 0.0);
  }
  if (!json_path.empty()) {
    std::ofstream file(json_path);
    file << out.dump(2) << "\n";
    if (!file) {
      std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}
