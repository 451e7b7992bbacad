// pipeline_bench: the asynchronous capture pipeline in a training loop with a
// snapshot after every optimizer step. Prints medians of:
//   stall   -- Checkpointer::CaptureAsync on the training thread, against one
//              memcpy of the same bytes into a warm buffer;
//   persist -- logical and stored MB/s of back-to-back captures until Flush,
//              against a synced write of the same stored bytes (--sync makes
//              the store sync its commits too, the fair comparison);
//   restore -- Checkpointer::Restore against torch::load of the same state,
//              warm, and with --cold also with the page cache dropped before
//              each repetition (Store::Open included; needs root);
//   loop    -- training-loop time with a snapshot per step against without,
//              and how much of it is the final Flush (the last snapshots'
//              encode, which a long run amortizes);
//   cpu     -- process CPU time per snapshot while persisting (the encoder's
//              cost: what a snapshot per step must find idle on the cores).
// Usage: pipeline_bench [width=1024] [layers=4] [steps=20] [runs=3] [dir]
//                       [--no-compress] [--sync] [--cold] [--json PATH]
//                       [--worker-nice N] [--torch-threads N]
//                       [--max-unflushed-mib N] [--max-unflushed-commits N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "trainsnap/checkpointer.h"
#include "trainsnap/store.h"
#include "workload_stats.h"

namespace {

using Clock = std::chrono::steady_clock;
using trainsnap::Checkpointer;
using trainsnap::Status;
using trainsnap::Store;
using trainsnap::TrainingState;
using trainsnap::bench::Median;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// User + system CPU seconds of the whole process so far.
double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

struct Setup {
  torch::nn::Sequential model;
  std::unique_ptr<torch::optim::Adam> optimizer;
  torch::Tensor x, y;
  Setup(int64_t width, int layers) {
    torch::manual_seed(1);
    for (int i = 0; i < layers; ++i) model->push_back(torch::nn::Linear(width, width));
    optimizer = std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3));
    x = torch::randn({64, width});
    y = torch::randn({64, width});
  }
  void Step() {
    optimizer->zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    optimizer->step();
  }
  TrainingState State() {
    TrainingState state;
    state.model = model.ptr().get();
    state.optimizer = optimizer.get();
    return state;
  }
};

}  // namespace

int main(int argc, char** argv) {
  int64_t width = 1024;
  int layers = 4;
  int steps = 20;
  int runs = 3;
  std::string dir_arg = "/tmp/pipeline_bench";
  bool no_compress = false;
  int worker_nice = trainsnap::StoreOptions().worker_nice;
  int torch_threads = 1;
  uint64_t max_unflushed_mib = 0;
  int max_unflushed_commits = 0;
  bool sync = false;
  bool cold = false;
  std::string json_path;
  CLI::App app{"pipeline_bench: the capture pipeline with a snapshot per optimizer step (see bench/README.md)"};
  app.add_option("width", width, "Linear layer width")->check(CLI::PositiveNumber);
  app.add_option("layers", layers, "Linear layers")->check(CLI::PositiveNumber);
  app.add_option("steps", steps, "optimizer steps (= snapshots) per loop")->check(CLI::PositiveNumber);
  app.add_option("runs", runs, "runs (medians are reported)")->check(CLI::PositiveNumber);
  app.add_option("dir", dir_arg, "scratch directory (removed at the end)");
  app.add_flag("--no-compress", no_compress, "StoreOptions::compress = false (raw chunks)");
  app.add_flag("--sync", sync, "StoreOptions::sync = true (commits synced, as the synced-write peer is)");
  app.add_flag("--cold", cold, "also restore and torch::load with the page cache dropped before each repetition (root)");
  app.add_option("--json", json_path, "write the medians as JSON to this file");
  app.add_option("--worker-nice", worker_nice, "StoreOptions::worker_nice")->check(CLI::Range(0, 19));
  app.add_option("--torch-threads", torch_threads, "LibTorch intra-op threads of the training loop")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-unflushed-mib", max_unflushed_mib, "StoreOptions::max_unflushed_bytes in MiB (0 = default)");
  app.add_option("--max-unflushed-commits", max_unflushed_commits,
                 "StoreOptions::max_unflushed_commits (0 = default)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  const std::filesystem::path dir = dir_arg;
  torch::set_num_threads(torch_threads);
  std::printf("width %lld, %d layers, %d steps, %d runs, torch threads %d, compress %s, sync %s, worker nice %d, "
              "max unflushed %llu MiB / %d commits (0 = default)\n",
              static_cast<long long>(width), layers, steps, runs, torch_threads, no_compress ? "off" : "on",
              sync ? "on" : "off", worker_nice, static_cast<unsigned long long>(max_unflushed_mib),
              max_unflushed_commits);

  std::vector<double> stall, memcpy_s, ratio, logical_mb_s, stored_mb_s, restore_s, load_s, overhead, step_s,
      flush_s, cpu_s, synced_mb_s, cold_restore_s, cold_load_s;
  for (int run = 0; run < runs; ++run) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    trainsnap::StoreOptions options;
    options.sync = sync;
    options.compress = !no_compress;
    options.worker_nice = worker_nice;
    options.max_unflushed_bytes = max_unflushed_mib << 20;
    options.max_unflushed_commits = max_unflushed_commits;
    if (options.reserve_bytes != 0 && options.reserve_bytes < 2 * options.max_unflushed_bytes) {
      options.reserve_bytes = 2 * options.max_unflushed_bytes;
    }
    auto opened = Store::Open((dir / "store").string(), options);
    Check(opened.status(), "open");
    std::unique_ptr<Store> store = std::move(opened).value();
    Setup setup(width, layers);
    setup.Step();  // optimizer state exists

    // Loop without snapshots.
    auto a = Clock::now();
    for (int i = 0; i < steps; ++i) setup.Step();
    const double without = Seconds(a, Clock::now());
    step_s.push_back(without / steps);

    // Loop with a snapshot per step (the Flush at the end is part of the cost).
    std::vector<double> run_stall;
    uint64_t bytes = 0;
    {
      Checkpointer checkpointer(*store);
      a = Clock::now();
      for (int i = 1; i <= steps; ++i) {
        setup.Step();
        auto s0 = Clock::now();
        auto handle = checkpointer.CaptureAsync(i, setup.State());
        run_stall.push_back(Seconds(s0, Clock::now()));
        Check(handle.status(), "capture");
      }
      const auto flush_start = Clock::now();
      Check(checkpointer.Flush(), "flush");
      flush_s.push_back(Seconds(flush_start, Clock::now()));
      const double with = Seconds(a, Clock::now());
      overhead.push_back(100.0 * (with - without) / without);
      auto info = store->Info(steps);
      Check(info.status(), "info");
      bytes = info->logical_bytes;

      // Persist throughput: back-to-back captures of changing state, no training.
      uint64_t logical = 0, stored = 0;
      const double cpu_before = ProcessCpuSeconds();
      a = Clock::now();
      for (int i = 1; i <= 5; ++i) {
        {
          torch::NoGradGuard no_grad;
          for (auto& p : setup.model->parameters()) p.add_(1e-3);
        }
        Check(checkpointer.CaptureAsync(1000 + i, setup.State()).status(), "capture");
      }
      Check(checkpointer.Flush(), "flush");
      const double persist = Seconds(a, Clock::now());
      cpu_s.push_back((ProcessCpuSeconds() - cpu_before) / 5);
      for (int i = 1; i <= 5; ++i) {
        auto pi = store->Info(1000 + i);
        Check(pi.status(), "info");
        logical += pi->logical_bytes;
        stored += pi->new_bytes;
      }
      logical_mb_s.push_back(logical / 1e6 / persist);
      stored_mb_s.push_back(stored / 1e6 / persist);
      auto synced = trainsnap::bench::SyncedWriteSeconds(stored, (dir / "synced_write.bin").string());
      Check(synced.status(), "synced write");
      synced_mb_s.push_back(stored / 1e6 / *synced);

      // Restore against torch::load of the same state.
      Setup target(width, layers);
      target.Step();
      std::vector<double> reps;
      for (int r = 0; r < 5; ++r) {
        a = Clock::now();
        Check(checkpointer.Restore(1005, target.State()), "restore");
        reps.push_back(Seconds(a, Clock::now()));
      }
      restore_s.push_back(Median(reps));
    }
    if (cold) {
      // A resumed process: nothing cached, the store opened, one restore.
      store.reset();
      Setup target(width, layers);
      target.Step();
      std::vector<double> reps;
      for (int r = 0; r < 3; ++r) {
        Check(trainsnap::bench::DropPageCache(), "drop page cache");
        a = Clock::now();
        auto reopened = Store::Open((dir / "store").string(), options);
        Check(reopened.status(), "reopen");
        Check(Checkpointer(**reopened).Restore(1005, target.State()), "cold restore");
        reps.push_back(Seconds(a, Clock::now()));
      }
      cold_restore_s.push_back(Median(reps));
    }
    torch::save(setup.model, (dir / "model.pt").string());
    torch::save(*setup.optimizer, (dir / "optimizer.pt").string());
    Setup target(width, layers);
    target.Step();
    std::vector<double> load_reps;
    for (int r = 0; r < 5; ++r) {
      a = Clock::now();
      torch::load(target.model, (dir / "model.pt").string());
      torch::load(*target.optimizer, (dir / "optimizer.pt").string());
      load_reps.push_back(Seconds(a, Clock::now()));
    }
    load_s.push_back(Median(load_reps));
    if (cold) {
      load_reps.clear();
      for (int r = 0; r < 3; ++r) {
        Check(trainsnap::bench::DropPageCache(), "drop page cache");
        a = Clock::now();
        torch::load(target.model, (dir / "model.pt").string());
        torch::load(*target.optimizer, (dir / "optimizer.pt").string());
        load_reps.push_back(Seconds(a, Clock::now()));
      }
      cold_load_s.push_back(Median(load_reps));
    }

    const double m = trainsnap::bench::MemcpySeconds(bytes, 5);
    stall.push_back(Median(run_stall));
    memcpy_s.push_back(m);
    ratio.push_back(Median(run_stall) / m);
    std::printf("run %d: %.1f MB/snapshot, step %.1f ms, stall %.2f ms, memcpy %.2f ms, persist %.0f MB/s logical %.0f "
                "stored, %.0f ms CPU/snapshot, restore %.1f ms, torch::load %.1f ms, loop overhead %.1f%% (final "
                "Flush %.0f ms)\n",
                run + 1, bytes / 1e6, step_s.back() * 1e3, stall.back() * 1e3, m * 1e3, logical_mb_s.back(),
                stored_mb_s.back(), cpu_s.back() * 1e3, restore_s.back() * 1e3, load_s.back() * 1e3, overhead.back(),
                flush_s.back() * 1e3);
  }
  std::printf("median of %d runs: step %.1f ms, stall %.2f ms, memcpy %.2f ms (ratio %.2fx), persist %.0f MB/s "
              "logical, %.0f MB/s stored, %.0f ms CPU/snapshot, restore %.1f ms vs torch::load %.1f ms (%.2fx), loop "
              "overhead %.1f%% (final Flush %.0f ms)\n",
              runs, Median(step_s) * 1e3, Median(stall) * 1e3, Median(memcpy_s) * 1e3, Median(ratio),
              Median(logical_mb_s), Median(stored_mb_s), Median(cpu_s) * 1e3, Median(restore_s) * 1e3,
              Median(load_s) * 1e3, Median(restore_s) / Median(load_s), Median(overhead), Median(flush_s) * 1e3);
  std::printf("persist %.0f MB/s stored vs a synced write of the same bytes %.0f MB/s (%.2fx, store sync %s)\n",
              Median(stored_mb_s), Median(synced_mb_s), Median(stored_mb_s) / Median(synced_mb_s), sync ? "on" : "off");
  if (cold) {
    std::printf("cold (page cache dropped): open + restore %.1f ms vs torch::load %.1f ms (%.2fx)\n",
                Median(cold_restore_s) * 1e3, Median(cold_load_s) * 1e3, Median(cold_restore_s) / Median(cold_load_s));
  }
  if (!json_path.empty()) {
    auto optional_median = [&](const std::vector<double>& v) { return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(Median(v)); };
    nlohmann::json doc{
        {"benchmark", "pipeline_bench"},
        {"options",
         {{"width", width}, {"layers", layers}, {"steps", steps}, {"runs", runs}, {"compress", !no_compress},
          {"sync", sync}, {"cold", cold}, {"torch_threads", torch_threads}, {"worker_nice", worker_nice}}},
        {"mb", "1e6 bytes"},
        {"step_s", Median(step_s)},
        {"stall_s", Median(stall)},
        {"memcpy_s", Median(memcpy_s)},
        {"stall_vs_memcpy", Median(ratio)},
        {"persist_logical_mb_s", Median(logical_mb_s)},
        {"persist_stored_mb_s", Median(stored_mb_s)},
        {"synced_write_mb_s", Median(synced_mb_s)},
        {"persist_vs_synced_write", Median(stored_mb_s) / Median(synced_mb_s)},
        {"encoder_cpu_s_per_snapshot", Median(cpu_s)},
        {"restore_s", Median(restore_s)},
        {"torch_load_s", Median(load_s)},
        {"restore_vs_torch_load", Median(restore_s) / Median(load_s)},
        {"cold_restore_s", optional_median(cold_restore_s)},
        {"cold_torch_load_s", optional_median(cold_load_s)},
        {"loop_overhead_pct", Median(overhead)},
        {"final_flush_s", Median(flush_s)}};
    std::ofstream out(json_path);
    out << doc.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  std::filesystem::remove_all(dir);
  return 0;
}
