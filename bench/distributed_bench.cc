// distributed_bench: DistributedCheckpointer with 1, 2 and 4 ranks on the
// same model (every rank a process on 127.0.0.1, Gloo), against LibTorch's
// torch::save/torch::load on every rank. Per rank: the training thread's
// stall per CaptureAsync (the loop that waits for the previous step's handle
// first, so the stall is the staging alone) against a plain memcpy (clone) of
// the same tensors; aggregate persist MB/s (snapshots back to back, every
// byte changed: the bytes all ranks wrote, and the state they hold, per
// second); the bytes each rank wrote (its share of the replicated state: the
// balance) and stored (from the global record); restore time of
// RestoreLatest against torch::load; the replica check off and on in
// interleaved runs (--rounds of each); with --retention, a retention drop:
// timed inside the checkpointer (wall, and the CPU of the thread running it),
// and what it adds to a blocking Capture (keep_last 2 against keep_last 0,
// the runs interleaved). --no-sync turns StoreOptions::sync off.
// Results: bench/README.md, "Several ranks".
//
//   distributed_bench [--ranks 1,2,4] [--mb 32] [--snapshots 6] [--rounds 3] [--replica-stride N] [--retention]
//                     [--no-sync] [--dir DIR] [--json FILE]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/torch.h>

#include "distributed/drop_timing.h"
#include "distributed/run_dir.h"
#include "trainsnap/distributed.h"
#include "trainsnap/store.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr int64_t kWidth = 1024;  // one Linear = 4 MiB of fp32 weights

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// CPU seconds of this process (every thread), to the nanosecond.
double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Job {
  explicit Job(int64_t mb) {
    torch::manual_seed(1);
    for (int64_t i = 0; i < std::max<int64_t>(1, mb / 4); ++i) {
      model->push_back(torch::nn::Linear(kWidth, kWidth));
    }
    optimizer = std::make_unique<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(1e-3));
    for (torch::Tensor& p : model->parameters()) p.mutable_grad() = torch::randn_like(p);
    optimizer->step();  // optimizer state exists from here: 3x the parameters
  }
  // Every byte of the state changes, as after an optimizer step.
  void Perturb() {
    torch::NoGradGuard no_grad;
    for (torch::Tensor& t : Tensors()) t.add_(1e-3);
  }
  std::vector<torch::Tensor> Tensors() {
    std::vector<torch::Tensor> all = model->parameters();
    for (const auto& [key, state] : optimizer->state()) {
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
      all.push_back(s.exp_avg());
      all.push_back(s.exp_avg_sq());
    }
    return all;
  }
  uint64_t Bytes() {
    uint64_t bytes = 0;
    for (const torch::Tensor& t : Tensors()) bytes += t.nbytes();
    return bytes;
  }
  trainsnap::TrainingState State() {
    trainsnap::TrainingState state;
    state.model = model.ptr().get();
    state.optimizer = optimizer.get();
    return state;
  }
  torch::nn::Sequential model;
  std::unique_ptr<torch::optim::AdamW> optimizer;
};

int RunRank(int rank, int world, const std::string& dir, const std::string& rendezvous, int64_t mb, int snapshots,
            bool verify, int stride, int keep_last, bool blocking, bool sync, const std::string& result_path) {
  torch::set_num_threads(1);
  const std::chrono::minutes timeout(5);
  auto store = c10::make_intrusive<c10d::FileStore>(rendezvous, world);
  auto gloo = c10d::ProcessGroupGloo::Options::create(timeout);
  gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  c10::intrusive_ptr<c10d::ProcessGroup> group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, gloo);

  Job job(mb);
  trainsnap::DistributedOptions options;
  options.timeout = timeout;
  options.store.sync = sync;
  options.store.reserve_bytes = 0;
  options.verify_replicas = verify;
  options.replica_check_stride = stride;
  options.store.retention.keep_last = keep_last;
  auto opened = trainsnap::DistributedCheckpointer::Open(dir + "/run", group, options);
  if (!opened.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, opened.status().ToString().c_str());
    return 1;
  }
  trainsnap::DistributedCheckpointer& checkpointer = **opened;
  json result;
  result["rank"] = rank;
  result["logical_bytes"] = job.Bytes();

  if (blocking) {
    // A retention run: the latency of a blocking Capture (stage, encode,
    // commit, global commit and, with keep_last, this step's retention drop).
    std::vector<double> capture_s;
    for (int s = 1; s <= snapshots; ++s) {
      job.Perturb();
      auto start = Clock::now();
      trainsnap::Status captured = checkpointer.Capture(s, job.State());
      capture_s.push_back(Seconds(start));
      if (!captured.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, captured.ToString().c_str());
        return 1;
      }
    }
    // The first keep_last + 1 captures drop nothing (nor do those of the
    // run without retention they are compared with).
    const size_t skip = static_cast<size_t>(std::min(keep_last + 1, snapshots - 1));
    const auto from = static_cast<std::ptrdiff_t>(skip);
    result["capture_ms"] = Median(std::vector<double>(capture_s.begin() + from, capture_s.end())) * 1e3;
    // The drops themselves, timed inside the checkpointer (a capture's
    // latency spreads by more than a drop costs).
    const trainsnap::internal::DropTotals drops = trainsnap::internal::RetentionDropTotals();
    result["drops"] = drops.drops;
    result["drop_ms"] = drops.drops == 0 ? 0.0 : drops.wall_s / static_cast<double>(drops.drops) * 1e3;
    result["drop_cpu_ms"] = drops.drops == 0 ? 0.0 : drops.cpu_s / static_cast<double>(drops.drops) * 1e3;
    std::ofstream(result_path) << result.dump();
    return 0;
  }
  // Stall vs memcpy: CaptureAsync returns once staged (host copies taken),
  // after the previous step's handle completed (as a training loop whose
  // steps outlast a commit finds it).
  // The stall's CPU too (every thread of the rank, from the call to its
  // return; the previous capture finished, so the pipeline was idle): what
  // the replica check adds to it, without the scheduling noise of 4 ranks
  // on 2 cores that the wall time carries.
  std::vector<double> stall, stall_cpu, memcpy_s;
  trainsnap::CaptureHandle previous;
  const auto persist_start = Clock::now();
  for (int s = 1; s <= snapshots; ++s) {
    job.Perturb();
    auto copy_start = Clock::now();
    std::vector<torch::Tensor> copies;
    for (const torch::Tensor& t : job.Tensors()) copies.push_back(t.clone());
    memcpy_s.push_back(Seconds(copy_start));
    copies.clear();
    if (s > 1) {
      trainsnap::Status settled = previous.Wait();
      if (!settled.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, settled.ToString().c_str());
        return 1;
      }
    }
    auto capture_start = Clock::now();
    const double cpu_start = ProcessCpuSeconds();
    auto handle = checkpointer.CaptureAsync(s, job.State());
    stall_cpu.push_back(ProcessCpuSeconds() - cpu_start);
    stall.push_back(Seconds(capture_start));
    if (!handle.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, handle.status().ToString().c_str());
      return 1;
    }
    previous = *handle;
  }
  trainsnap::Status flushed = checkpointer.Flush();
  const double persist_s = Seconds(persist_start);
  if (!flushed.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, flushed.ToString().c_str());
    return 1;
  }
  result["stall_ms"] = Median(stall) * 1e3;
  result["stall_cpu_ms"] = Median(stall_cpu) * 1e3;
  result["memcpy_ms"] = Median(memcpy_s) * 1e3;
  result["persist_s"] = persist_s;

  // Restore into fresh objects, against torch::load of torch::save files.
  const std::string model_pt = dir + "/torch-model-" + std::to_string(rank) + ".pt";
  const std::string optim_pt = dir + "/torch-optim-" + std::to_string(rank) + ".pt";
  auto save_start = Clock::now();
  torch::save(job.model, model_pt);
  torch::save(*job.optimizer, optim_pt);
  result["torch_save_s"] = Seconds(save_start);
  // Both timed phases start on every rank at once (a barrier first): a
  // restore's exchange would otherwise count the wait for a rank still in
  // its torch::save or torch::load, and the ranks' torch::load would not
  // contend as the restores do.
  auto barrier = [&] { group->barrier()->wait(); };
  {
    Job fresh(mb);
    barrier();
    auto start = Clock::now();
    torch::load(fresh.model, model_pt);
    torch::load(*fresh.optimizer, optim_pt);
    result["torch_load_s"] = Seconds(start);
  }
  {
    Job fresh(mb);
    barrier();
    auto start = Clock::now();
    auto restored = checkpointer.RestoreLatest(fresh.State());
    result["restore_s"] = Seconds(start);
    if (!restored.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, restored.status().ToString().c_str());
      return 1;
    }
  }
  std::ofstream(result_path) << result.dump();
  return 0;
}

json RunWorld(const std::string& self, const std::string& base, int world, int64_t mb, int snapshots, bool verify,
              int stride, bool sync, int keep_last = 0, bool blocking = false) {
  const std::string dir = base + "/ranks-" + std::to_string(world) + (verify ? "-verify" : "") +
                          (blocking ? "-keep" + std::to_string(keep_last) : "");
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args{self, "rank", "--rank", std::to_string(r), "--world", std::to_string(world),
                                  "--dir", dir, "--rendezvous", dir + "/rendezvous", "--mb", std::to_string(mb),
                                  "--snapshots", std::to_string(snapshots), "--verify", verify ? "1" : "0",
                                  "--stride", std::to_string(stride), "--keep-last", std::to_string(keep_last),
                                  "--blocking", blocking ? "1" : "0", "--sync", sync ? "1" : "0",
                                  "--result",
                                  dir + "/result-" + std::to_string(r) + ".json"};
    const pid_t pid = fork();
    if (pid == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  json out;
  out["ranks"] = world;
  out["ok"] = ok;
  if (!ok) return out;
  if (blocking) {
    double capture = 0, drop = 0, drop_cpu = 0;
    for (int r = 0; r < world; ++r) {
      json rank = json::parse(std::ifstream(dir + "/result-" + std::to_string(r) + ".json"));
      capture = std::max(capture, rank["capture_ms"].get<double>());
      drop = std::max(drop, rank["drop_ms"].get<double>());
      drop_cpu += rank["drop_cpu_ms"].get<double>() / world;
      out["per_rank"].push_back(rank);
    }
    out["capture_ms_max"] = capture;
    out["drop_ms_max"] = drop;          // the slowest rank's mean drop
    out["drop_cpu_ms_mean"] = drop_cpu;  // a rank's mean drop, mean over ranks
    return out;
  }
  double persist = 0, restore = 0, load = 0;
  uint64_t logical = 0;
  for (int r = 0; r < world; ++r) {
    json rank = json::parse(std::ifstream(dir + "/result-" + std::to_string(r) + ".json"));
    persist = std::max(persist, rank["persist_s"].get<double>());
    restore = std::max(restore, rank["restore_s"].get<double>());
    load = std::max(load, rank["torch_load_s"].get<double>());
    logical += rank["logical_bytes"].get<uint64_t>();
    out["per_rank"].push_back(rank);
  }
  // Stored bytes per rank: the global record of the last step.
  auto global = trainsnap::Store::OpenReadOnly(trainsnap::internal::GlobalStorePath(dir + "/run"));
  if (global.ok()) {
    auto manifest = (*global)->Manifest(snapshots);
    if (manifest.ok()) {
      auto record = trainsnap::internal::ParseGlobalRecord(*manifest);
      if (record.ok()) {
        for (const trainsnap::internal::RankFigures& f : record->ranks) {
          out["stored_bytes_last_step"].push_back(f.stored_bytes);
          out["new_bytes_last_step"].push_back(f.new_bytes);
          out["written_bytes_last_step"].push_back(f.logical_bytes);  // this rank's share
        }
      }
    }
  }
  // What every rank holds, per second; and what the ranks wrote (the
  // replicated state once in all), per second.
  out["state_persist_mb_s"] = static_cast<double>(logical) * snapshots / persist / 1e6;
  uint64_t written = 0, most = 0;
  for (const auto& b : out["written_bytes_last_step"]) {
    written += b.get<uint64_t>();
    most = std::max(most, b.get<uint64_t>());
  }
  out["aggregate_persist_mb_s"] = static_cast<double>(written) * snapshots / persist / 1e6;
  // Balance: the largest share against the mean (1.00 = perfectly even).
  out["balance_max_over_mean"] = written == 0 ? 0.0 : static_cast<double>(most) * world / static_cast<double>(written);
  out["restore_s_max"] = restore;
  out["torch_load_s_max"] = load;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"DistributedCheckpointer with several ranks vs torch::save/load"};
  std::vector<int> worlds{1, 2, 4};
  int64_t mb = 32;
  int snapshots = 6;
  int rounds = 3;
  bool retention = false;
  std::string dir = (fs::temp_directory_path() / "trainsnap_distributed_bench").string();
  std::string json_path;
  app.add_option("--ranks", worlds, "world sizes to run")->delimiter(',');
  app.add_option("--mb", mb, "MiB of parameters per rank (optimizer state adds 2x)");
  app.add_option("--snapshots", snapshots, "snapshots per rank and run")->check(CLI::Range(4, 100000));
  app.add_option("--rounds", rounds, "runs with the replica check off and on, interleaved, per world size");
  app.add_flag("--retention", retention, "also measure a retention drop (keep_last 2 against 0, interleaved)");
  int stride = trainsnap::DistributedOptions{}.replica_check_stride;
  app.add_option("--replica-stride", stride, "DistributedOptions::replica_check_stride of the runs with the check on")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--dir", dir, "working directory (removed first)");
  app.add_option("--json", json_path, "write the results here");
  bool no_sync = false;
  app.add_flag("--no-sync", no_sync, "StoreOptions::sync = false (no fsync: what the disk's syncs cost)");
  int rank = 0, world = 1, rank_verify = 0, keep_last = 0, blocking = 0, rank_sync = 1;
  std::string rendezvous, result;
  CLI::App* one = app.add_subcommand("rank", "one rank (internal)");
  one->add_option("--rank", rank);
  one->add_option("--world", world);
  one->add_option("--dir", dir);
  one->add_option("--rendezvous", rendezvous);
  one->add_option("--mb", mb);
  one->add_option("--snapshots", snapshots);
  one->add_option("--result", result);
  one->add_option("--verify", rank_verify);
  one->add_option("--stride", stride);
  one->add_option("--keep-last", keep_last);
  one->add_option("--blocking", blocking);
  one->add_option("--sync", rank_sync);
  CLI11_PARSE(app, argc, argv);
  if (*one) {
    return RunRank(rank, world, dir, rendezvous, mb, snapshots, rank_verify != 0, stride, keep_last, blocking != 0,
                   rank_sync != 0, result);
  }

  const bool sync = !no_sync;
  const std::string self = fs::canonical("/proc/self/exe").string();
  json all = json::array();
  json summary = json::array();
  std::printf("%5s %6s %10s %10s %12s %12s %16s %8s %14s %10s %12s\n", "ranks", "verify", "stall_ms", "memcpy_ms",
              "written_MB/s", "state_MB/s", "written_MB/rank", "max/mean", "stored_MB/rank", "restore_s",
              "torch_load_s");
  for (int w : worlds) {
    // Off and on alternate, so that a change in the machine's load hits both.
    std::vector<double> stall[2], stall_cpu[2], restore, load;
    for (int round = 0; round < rounds; ++round) {
      for (bool with_verify : {false, true}) {
        json r = RunWorld(self, dir, w, mb, snapshots, with_verify, stride, sync);
        r["replica_check_stride"] = stride;
        r["verify_replicas"] = with_verify;
        r["round"] = round;
        all.push_back(r);
        if (!r["ok"].get<bool>()) {
          std::printf("%5d failed\n", w);
          continue;
        }
        std::string written;
        for (const auto& b : r["written_bytes_last_step"]) {
          written += (written.empty() ? "" : "/") + std::to_string(b.get<uint64_t>() >> 20);
        }
        std::string stored;
        for (const auto& b : r["stored_bytes_last_step"]) {
          stored += (stored.empty() ? "" : "/") + std::to_string(b.get<uint64_t>() >> 20);
        }
        double worst = 0, copy = 0, cpu = 0;
        for (const auto& pr : r["per_rank"]) {
          worst = std::max(worst, pr["stall_ms"].get<double>());
          copy = std::max(copy, pr["memcpy_ms"].get<double>());
          cpu += pr["stall_cpu_ms"].get<double>() / w;  // a rank's, mean over ranks
        }
        stall[with_verify ? 1 : 0].push_back(worst);
        stall_cpu[with_verify ? 1 : 0].push_back(cpu);
        restore.push_back(r["restore_s_max"].get<double>());
        load.push_back(r["torch_load_s_max"].get<double>());
        std::printf("%5d %6s %10.1f %10.1f %12.0f %12.0f %16s %8.3f %14s %10.3f %12.3f\n", w,
                    with_verify ? "on" : "off", worst, copy, r["aggregate_persist_mb_s"].get<double>(),
                    r["state_persist_mb_s"].get<double>(), written.c_str(), r["balance_max_over_mean"].get<double>(),
                    stored.c_str(), r["restore_s_max"].get<double>(), r["torch_load_s_max"].get<double>());
        std::fflush(stdout);
      }
    }
    json row;
    row["ranks"] = w;
    row["stall_ms_verify_off"] = Median(stall[0]);
    row["stall_ms_verify_on"] = Median(stall[1]);
    row["stall_on_over_off"] = Median(stall[0]) > 0 ? Median(stall[1]) / Median(stall[0]) : 0.0;
    row["stall_cpu_ms_verify_off"] = Median(stall_cpu[0]);
    row["stall_cpu_ms_verify_on"] = Median(stall_cpu[1]);
    row["stall_cpu_on_over_off"] = Median(stall_cpu[0]) > 0 ? Median(stall_cpu[1]) / Median(stall_cpu[0]) : 0.0;
    row["restore_s"] = Median(restore);
    row["torch_load_s"] = Median(load);
    row["restore_over_torch_load"] = Median(load) > 0 ? Median(restore) / Median(load) : 0.0;
    summary.push_back(row);
  }
  if (retention) {
    for (int w : worlds) {
      std::vector<double> keep[2], drop, drop_cpu;
      for (int round = 0; round < rounds; ++round) {
        for (int k : {0, 1}) {
          json r = RunWorld(self, dir, w, mb, snapshots, /*verify=*/true, stride, sync, /*keep_last=*/k == 0 ? 0 : 2,
                            /*blocking=*/true);
          r["keep_last"] = k == 0 ? 0 : 2;
          all.push_back(r);
          if (!r["ok"].get<bool>()) continue;
          keep[k].push_back(r["capture_ms_max"].get<double>());
          if (k == 1) {
            drop.push_back(r["drop_ms_max"].get<double>());
            drop_cpu.push_back(r["drop_cpu_ms_mean"].get<double>());
          }
        }
      }
      for (json& row : summary) {
        if (row["ranks"] != w) continue;
        row["capture_ms_keep_all"] = Median(keep[0]);
        row["capture_ms_keep_last_2"] = Median(keep[1]);
        row["retention_drop_ms"] = Median(keep[1]) - Median(keep[0]);
        // Timed inside: the wall time of the slowest rank's drops, and the
        // CPU time a rank's drop takes (whatever the cores: 4 ranks on a
        // 2-core machine wait for each other's CPU, which the wall counts).
        row["drop_ms_inside"] = Median(drop);
        row["drop_cpu_ms_inside"] = Median(drop_cpu);
      }
    }
  }
  std::printf("\n%5s %14s %13s %8s %12s %10s %12s %9s %13s %13s %9s %11s %12s\n", "ranks", "stall_off_ms",
              "stall_on_ms", "on/off", "cpu_on/off", "restore_s", "torch_load_s", "ratio", "capture_ms",
              "capture_k2_ms", "drop_ms", "drop_in_ms", "drop_cpu_ms");
  for (const json& row : summary) {
    std::printf("%5d %14.1f %13.1f %8.3f %12.3f %10.3f %12.3f %9.2f %13.1f %13.1f %9.1f %11.1f %12.1f\n",
                row["ranks"].get<int>(), row["stall_ms_verify_off"].get<double>(),
                row["stall_ms_verify_on"].get<double>(), row["stall_on_over_off"].get<double>(),
                row["stall_cpu_on_over_off"].get<double>(), row["restore_s"].get<double>(),
                row["torch_load_s"].get<double>(), row["restore_over_torch_load"].get<double>(),
                row.value("capture_ms_keep_all", 0.0), row.value("capture_ms_keep_last_2", 0.0),
                row.value("retention_drop_ms", 0.0), row.value("drop_ms_inside", 0.0),
                row.value("drop_cpu_ms_inside", 0.0));
  }
  json doc;
  doc["runs"] = all;
  doc["summary"] = summary;
  if (!json_path.empty()) std::ofstream(json_path) << doc.dump(2);
  return 0;
}
