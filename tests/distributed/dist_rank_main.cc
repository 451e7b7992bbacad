// trainsnap_dist_rank: one rank of a distributed test scenario, exec'ed by
// distributed_test.cc. Writes "key value" lines to --out (and the rank's
// state dump to <out>.state); exit code 0, or 3 after an unexpected error.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#define XXH_INLINE_ALL  // the test's own XXH3, for the RNG rule of new ranks
#include <xxhash.h>

#include "distributed/dist_rig.h"
#include "distributed/replica_placement.h"
#include "trainsnap/distributed.h"
#include "trainsnap/sampler.h"

namespace {

using trainsnap::DistributedCheckpointer;
using trainsnap::DistributedOptions;
using trainsnap::Status;
using trainsnap::StatusCode;
using trainsnap::TensorState;
using trainsnap::TensorStateful;
using trainsnap::TrainingState;
using trainsnap::dist_test::EncodeDump;
using trainsnap::dist_test::Job;
using trainsnap::dist_test::StateDump;

// A Stateful holding one number; counts its LoadState calls.
class Counter final : public trainsnap::Stateful {
 public:
  explicit Counter(int64_t v) : value(v) {}
  std::string SaveState() const override { return std::to_string(value); }
  Status LoadState(std::string_view bytes) override {
    ++loads;
    value = std::stoll(std::string(bytes));
    return Status::OK();
  }
  int64_t value;
  int loads = 0;
};

// A TensorStateful holding one tensor; refuses to load when told to.
class Tensors final : public TensorStateful {
 public:
  explicit Tensors(float v) : value(torch::full({3}, v)) {}
  Status SaveState(TensorState* state) const override {
    state->type = "test.Tensors";
    state->tensors["value"] = value.clone();
    return Status::OK();
  }
  Status LoadState(TensorState state) override {
    if (refuse) return Status::InvalidArgument("refusing to load");
    value.copy_(state.tensors.at("value"));
    return Status::OK();
  }
  torch::Tensor value;
  bool refuse = false;
};

std::map<std::string, std::string> flags;
std::ofstream out;

std::string Flag(const std::string& name, const std::string& fallback = "") {
  auto it = flags.find(name);
  return it == flags.end() ? fallback : it->second;
}
int64_t IntFlag(const std::string& name, int64_t fallback) {
  auto it = flags.find(name);
  return it == flags.end() ? fallback : std::stoll(it->second);
}

void Put(const std::string& key, const std::string& value) { out << key << ' ' << value << '\n' << std::flush; }

[[noreturn]] void Fail(const std::string& what, const Status& status) {
  Put("error", what + ": " + status.ToString());
  std::fprintf(stderr, "rank %s: %s: %s\n", Flag("rank").c_str(), what.c_str(), status.ToString().c_str());
  std::fflush(stderr);
  std::_Exit(3);
}

void WriteState(const std::string& bytes) {
  std::ofstream state(Flag("out") + ".state", std::ios::binary | std::ios::trunc);
  state.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string Join(const std::vector<int64_t>& steps) {
  std::string text;
  for (int64_t s : steps) text += (text.empty() ? "" : ",") + std::to_string(s);
  return text.empty() ? "-" : text;
}

void PutStatus(const std::string& prefix, const Status& status) {
  Put(prefix + "code", std::string(trainsnap::StatusCodeName(status.code())));
  Put(prefix + "message", status.message());
}

std::unique_ptr<DistributedCheckpointer> OpenOrFail(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                                   const DistributedOptions& options) {
  auto opened = DistributedCheckpointer::Open(Flag("run_dir"), group, options);
  if (!opened.ok()) Fail("open", opened.status());
  return std::move(opened).value();
}

int Run() {
  const int rank = static_cast<int>(IntFlag("rank", 0));
  const int world = static_cast<int>(IntFlag("world", 1));
  const std::chrono::milliseconds timeout(IntFlag("timeout_ms", 10000));
  torch::set_num_threads(1);
  auto group = trainsnap::dist_test::MakeGroup(Flag("rendezvous"), rank, world, timeout);
  DistributedOptions options;
  options.timeout = timeout;
  options.store.sync = IntFlag("sync", 0) != 0;
  options.store.threads = 1;
  options.store.reserve_bytes = 0;  // 40 MiB per rank and launch would dominate the tests' time
  options.checkpointer.threads = 1;
  options.store.retention.keep_last = IntFlag("keep_last", 0);
  const bool sharded = IntFlag("sharded", 0) != 0;
  options.optimizer_replicated = !sharded;
  options.model_replicated = IntFlag("local_model", 0) == 0;
  const std::string scenario = Flag("scenario");

  if (scenario == "train") {
    // Resume from the latest global step (if any), train to --steps with a
    // CaptureAsync after every step.
    Job job(group, sharded);
    auto checkpointer = OpenOrFail(group, options);
    // What this rank itself sees before the restore: every rank must see
    // the same latest global step, whatever rank a crash killed.
    auto seen = checkpointer->Steps();
    if (!seen.ok()) Fail("steps", seen.status());
    Put("seen", seen->empty() ? "-" : std::to_string(seen->back()));
    int64_t first = 1;
    if (IntFlag("resume", 0) != 0) {
      auto latest = checkpointer->RestoreLatest(job.State());
      if (latest.ok()) {
        first = *latest + 1;
      } else if (latest.status().code() != StatusCode::kNotFound) {
        Fail("restore latest", latest.status());
      }
    }
    Put("resumed", std::to_string(first - 1));
    const int64_t steps = IntFlag("steps", 8);
    const int64_t sleep_ms = IntFlag("sleep_ms", 0);
    for (int64_t step = first; step <= steps; ++step) {
      job.Step(step);
      auto handle = checkpointer->CaptureAsync(step, job.State());
      if (!handle.ok()) Fail("capture", handle.status());
      if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    }
    Status flushed = checkpointer->Flush();
    if (!flushed.ok()) Fail("flush", flushed);
    auto listed = checkpointer->Steps();
    if (!listed.ok()) Fail("steps", listed.status());
    Put("steps", Join(*listed));
    WriteState(job.Dump());
    return 0;
  }

  if (scenario == "mismatch") {
    // Steps 1-2 captured, step 3 not; the restore of step 2 targets a model
    // of another width on rank --bad.
    const int bad = static_cast<int>(IntFlag("bad", -1));
    Job job(group, sharded);
    std::unique_ptr<Job> other;
    if (rank == bad) other = std::make_unique<Job>(group, sharded, 33);  // reseeds the RNG as `job` did
    auto checkpointer = OpenOrFail(group, options);
    std::string at_two;
    for (int64_t step = 1; step <= 3; ++step) {
      job.Step(step);
      if (step == 3) break;
      Status captured = checkpointer->Capture(step, job.State());
      if (!captured.ok()) Fail("capture", captured);
      at_two = job.Dump();
    }
    Job& target = rank == bad ? *other : job;
    const std::string before = target.Dump();
    Status failed = checkpointer->Restore(2, target.State());
    PutStatus("restore_", failed);
    Put("unchanged", target.Dump() == before ? "1" : "0");
    Status restored = checkpointer->Restore(2, job.State());
    PutStatus("good_restore_", restored);
    Put("restored_equal", job.Dump() == at_two ? "1" : "0");
    // Step 3 fails to stage on rank --bad only (a null extra): every rank's
    // handle and Flush report that rank's error, and step 3 does not become
    // global.
    TrainingState state = job.State();
    if (rank == bad) state.extra["cursor"] = nullptr;
    auto handle = checkpointer->CaptureAsync(3, state);
    PutStatus("capture_async_", handle.status());
    if (handle.ok()) PutStatus("handle_", handle->Wait());
    PutStatus("flush_", checkpointer->Flush());
    auto listed = checkpointer->Steps();
    if (!listed.ok()) Fail("steps", listed.status());
    Put("steps", Join(*listed));
    // The step can then be captured on every rank.
    PutStatus("retry_", checkpointer->Capture(3, job.State()));
    // Step 4 with extra keys that sort after every other and tensor_extra
    // on every rank: a distributed run takes them as one process does.
    Counter late(100 + rank);
    Tensors tensors(static_cast<float>(rank));
    TrainingState with_extras = job.State();
    with_extras.extra["~~late"] = &late;
    with_extras.tensor_extra["opt"] = &tensors;
    PutStatus("extras_capture_", checkpointer->Capture(4, with_extras));
    auto after = checkpointer->Steps();
    if (!after.ok()) Fail("steps", after.status());
    Put("steps_after", Join(*after));
    const std::string at_four = job.Dump();
    // Restore 4 with rank --bad's tensor_extra refusing its bytes: it loads
    // before the ranks agree, so no rank applies anything, and the extras
    // already loaded (every rank's "~~late") get their previous state back.
    job.Step(5);
    const std::string trained = job.Dump();
    late.value = -1;
    tensors.value.fill_(-1.0f);
    tensors.refuse = rank == bad;
    PutStatus("extras_refused_", checkpointer->Restore(4, with_extras));
    Put("extras_unchanged",
        job.Dump() == trained && late.value == -1 && late.loads == 2 && tensors.value.equal(torch::full({3}, -1.0f))
            ? "1"
            : "0");
    tensors.refuse = false;
    PutStatus("extras_restore_", checkpointer->Restore(4, with_extras));
    Put("extras_restored", job.Dump() == at_four && late.value == 100 + rank &&
                                   tensors.value.equal(torch::full({3}, static_cast<float>(rank)))
                               ? "1"
                               : "0");
    return 0;
  }

  if (scenario == "tensor_extra") {
    // Every rank's state holds a tensor_extra with a tensor of its own.
    // Step 1 is restored twice: first with rank --bad's tensor_extra
    // refusing its state (every rank returns that rank's error, nothing
    // changes anywhere), then for real (bitwise, tensor_extra included).
    class Counter final : public TensorStateful {
     public:
      Status SaveState(TensorState* state) const override {
        *state = TensorState();
        state->type = "counter";
        state->tensors["value"] = value;
        return Status::OK();
      }
      Status LoadState(TensorState state) override {
        if (refuse) return Status::InvalidArgument("counter refused its state");
        value = state.tensors.at("value").clone();
        return Status::OK();
      }
      torch::Tensor value;
      bool refuse = false;
    } counter;
    const int bad = static_cast<int>(IntFlag("bad", -1));
    Job job(group, sharded);
    auto checkpointer = OpenOrFail(group, options);
    counter.value = torch::full({4}, static_cast<float>(rank + 1));
    auto dump = [&] {
      const torch::Tensor value = counter.value.contiguous();
      return job.Dump() + std::string(static_cast<const char*>(value.data_ptr()), value.nbytes());
    };
    TrainingState state = job.State();
    state.tensor_extra["counter"] = &counter;
    job.Step(1);
    Status captured = checkpointer->Capture(1, state);
    if (!captured.ok()) Fail("capture 1", captured);
    const std::string at_one = dump();
    job.Step(2);
    counter.value = counter.value + 10;
    captured = checkpointer->Capture(2, state);
    if (!captured.ok()) Fail("capture 2", captured);
    const std::string before = dump();
    counter.refuse = rank == bad;
    PutStatus("refused_", checkpointer->Restore(1, state));
    Put("unchanged", dump() == before ? "1" : "0");
    counter.refuse = false;
    PutStatus("restore_", checkpointer->Restore(1, state));
    Put("restored_equal", dump() == at_one ? "1" : "0");
    return 0;
  }

  if (scenario == "world") {
    Job job(group, sharded);
    auto checkpointer = OpenOrFail(group, options);
    if (Flag("phase") == "capture") {
      for (int64_t step = 1; step <= 2; ++step) {
        job.Step(step);
        Status captured = checkpointer->Capture(step, job.State());
        if (!captured.ok()) Fail("capture", captured);
      }
      return 0;
    }
    const std::string before = job.Dump();
    auto latest = checkpointer->RestoreLatest(job.State());
    PutStatus("restore_", latest.status());
    Put("unchanged", job.Dump() == before ? "1" : "0");
    return 0;
  }

  if (scenario == "dead") {
    // Rank --victim dies after step 2's global commit; the others capture
    // step 3 and must get an error within the timeout.
    const int victim = static_cast<int>(IntFlag("victim", 1));
    Job job(group, sharded);
    auto checkpointer = OpenOrFail(group, options);
    for (int64_t step = 1; step <= 2; ++step) {
      Status captured = checkpointer->Capture(step, job.State());
      if (!captured.ok()) Fail("capture", captured);
    }
    if (rank == victim) std::raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto start = std::chrono::steady_clock::now();
    Status captured = checkpointer->Capture(3, job.State());
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    PutStatus("capture_", captured);
    Put("elapsed_ms", std::to_string(elapsed.count()));
    auto again = checkpointer->CaptureAsync(4, job.State());
    PutStatus("again_", again.status());
    Status restored = checkpointer->Restore(2, job.State());
    PutStatus("restore_", restored);
    std::fflush(nullptr);
    std::_Exit(0);  // the group's destructor would wait for the dead rank
  }

  if (scenario == "rollback") {
    // Steps 1-4 captured, step 5 trained only; roll back to 2 and train 3-4
    // again: the same states as the first time, captured again.
    Job job(group, sharded);
    auto checkpointer = OpenOrFail(group, options);
    std::string at_two, at_four;
    for (int64_t step = 1; step <= 5; ++step) {
      job.Step(step);
      if (step == 5) break;
      Status captured = checkpointer->Capture(step, job.State());
      if (!captured.ok()) Fail("capture", captured);
      if (step == 2) at_two = job.Dump();
      if (step == 4) at_four = job.Dump();
    }
    PutStatus("rollback_", checkpointer->RollbackTo(2, job.State()));
    Put("at_two", job.Dump() == at_two ? "1" : "0");
    auto listed = checkpointer->Steps();
    if (!listed.ok()) Fail("steps", listed.status());
    Put("steps_after_rollback", Join(*listed));
    for (int64_t step = 3; step <= 4; ++step) {
      job.Step(step);
      Status captured = checkpointer->Capture(step, job.State());
      if (!captured.ok()) Fail("capture again", captured);
    }
    Put("at_four", job.Dump() == at_four ? "1" : "0");
    listed = checkpointer->Steps();
    if (!listed.ok()) Fail("steps", listed.status());
    Put("steps", Join(*listed));
    return 0;
  }
  if (scenario == "replicas") {
    // Every rank trains the same model on the same batches (no allreduce
    // needed): its replicated state is equal on every rank. Layers 0-1 are
    // frozen (a base, captured with ModelState::kFull). Steps 1-2 captured,
    // then step 1 restored: every rank reads the tensors other ranks stored.
    options.checkpointer.model_state = trainsnap::ModelState::kFull;
    options.verify_replicas = IntFlag("verify", 0) != 0;
    torch::manual_seed(11);
    torch::nn::Sequential net;
    for (int i = 0; i < 8; ++i) net->push_back(torch::nn::Linear(48, 48));
    std::vector<torch::Tensor> trainable;
    int64_t frozen_bytes = 0;
    for (const auto& item : net->named_parameters()) {
      const bool frozen = item.key().rfind("0.", 0) == 0 || item.key().rfind("1.", 0) == 0;
      item.value().set_requires_grad(!frozen);
      if (frozen) frozen_bytes += static_cast<int64_t>(item.value().nbytes());
      if (!frozen) trainable.push_back(item.value());
    }
    torch::optim::AdamW optimizer(trainable, torch::optim::AdamWOptions(1e-2));
    TrainingState state;
    state.model = net.ptr().get();
    state.optimizer = &optimizer;
    auto dump = [&] {
      std::string bytes;
      auto append = [&](const torch::Tensor& t) {
        torch::Tensor c = t.detach().contiguous();
        bytes.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
      };
      for (const torch::Tensor& p : net->parameters()) append(p);
      for (const torch::Tensor& p : trainable) {
        const auto& s = static_cast<const torch::optim::AdamWParamState&>(
            *optimizer.state().at(c10::guts::to_string(p.unsafeGetTensorImpl())));
        bytes += std::to_string(s.step()) + ";";
        append(s.exp_avg());
        append(s.exp_avg_sq());
      }
      return bytes;
    };
    auto train = [&](int64_t step) {
      torch::Generator data = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(step));
      torch::Tensor x = torch::randn({8, 48}, data);
      optimizer.zero_grad();
      torch::mse_loss(net->forward(x), x).backward();
      optimizer.step();
    };
    auto checkpointer = OpenOrFail(group, options);
    std::string at_one;
    for (int64_t step = 1; step <= 2; ++step) {
      train(step);
      Status captured = checkpointer->Capture(step, state);
      if (!captured.ok()) Fail("capture", captured);
      if (step == 1) at_one = dump();
    }
    int64_t replicated_bytes = 0;
    for (const torch::Tensor& p : net->parameters()) replicated_bytes += static_cast<int64_t>(p.nbytes());
    for (const torch::Tensor& p : trainable) replicated_bytes += 2 * static_cast<int64_t>(p.nbytes());
    Put("replicated_bytes", std::to_string(replicated_bytes));
    Put("frozen_bytes", std::to_string(frozen_bytes));
    PutStatus("restore_", checkpointer->Restore(1, state));
    Put("restored_equal", dump() == at_one ? "1" : "0");
    train(2);
    if (options.verify_replicas) {
      // One rank's replica drifts: step 3 fails on every rank, then captures
      // once the replica is equal again.
      const int bad = static_cast<int>(IntFlag("bad", -1));
      torch::Tensor weight = net[5]->as<torch::nn::Linear>()->weight;
      torch::Tensor saved = weight.detach().clone();
      if (rank == bad) {
        torch::NoGradGuard no_grad;
        weight.view(-1)[7].add_(1e-3);
      }
      PutStatus("diverged_", checkpointer->Capture(3, state));
      auto listed = checkpointer->Steps();
      if (!listed.ok()) Fail("steps", listed.status());
      Put("steps_after_divergence", Join(*listed));
      {
        torch::NoGradGuard no_grad;
        weight.copy_(saved);
      }
      PutStatus("equal_again_", checkpointer->Capture(3, state));
    }
    Status flushed = checkpointer->Flush();
    PutStatus("flush_", flushed);
    auto listed = checkpointer->Steps();
    if (!listed.ok()) Fail("steps", listed.status());
    Put("steps", Join(*listed));
    return 0;
  }
  if (scenario == "elastic") {
    // A data-parallel job whose data order comes from a sampler in
    // distributed mode (TrainingState::extra). --phase capture: steps
    // 1..--steps captured at this world size (the loop that waits for the
    // previous handle), each rank's state at the last step dumped into
    // --dumps. --phase restore: the latest step restored at this world size
    // and every restored tensor compared bitwise with what the --captured
    // ranks dumped; then three more steps trained and captured, and the rest
    // of the sampler's epoch taken.
    constexpr size_t kSamples = 50;
    Job job(group, sharded);
    trainsnap::ResumableSampler sampler(kSamples, 99);
    Status distributed = sampler.Distribute(rank, world);
    if (!distributed.ok()) Fail("distribute", distributed);
    sampler.reset();
    std::string taken;
    auto take = [&] {
      auto indices = sampler.next(2);
      if (!indices.has_value()) return false;
      Status consumed = sampler.BatchConsumed();
      if (!consumed.ok()) Fail("batch consumed", consumed);
      for (size_t i : *indices) taken += (taken.empty() ? "" : ",") + std::to_string(i);
      return true;
    };
    TrainingState state = job.State();
    state.extra["sampler"] = &sampler;
    auto checkpointer = OpenOrFail(group, options);
    const std::string dumps = Flag("dumps");
    auto dump = [&] {
      StateDump d = job.NamedDump();
      d["sampler"] = sampler.SaveState();
      return d;
    };
    if (Flag("phase") == "capture") {
      trainsnap::CaptureHandle previous;
      const int64_t steps = IntFlag("steps", 3);
      for (int64_t step = 1; step <= steps; ++step) {
        job.Step(step);
        take();
        if (step > 1) {
          Status settled = previous.Wait();
          if (!settled.ok()) Fail("previous capture", settled);
        }
        auto handle = checkpointer->CaptureAsync(step, state);
        if (!handle.ok()) Fail("capture", handle.status());
        previous = *handle;
      }
      Status flushed = checkpointer->Flush();
      if (!flushed.ok()) Fail("flush", flushed);
      std::ofstream(dumps + "/captured-" + std::to_string(rank), std::ios::binary) << EncodeDump(dump());
      Put("taken", taken);
      return 0;
    }
    const StateDump before = dump();
    auto latest = checkpointer->RestoreLatest(state);
    PutStatus("restore_", latest.status());
    if (!latest.ok()) {
      Put("unchanged", trainsnap::dist_test::FirstDifference(before, dump()).empty() ? "1" : "0");
      std::fflush(nullptr);
      std::_Exit(0);  // a rank may have died: the group's destructor would wait for it
    }
    Put("restored_step", std::to_string(*latest));
    // What each restored tensor must be: replicated state as any captured
    // rank had it, optimizer state from whichever rank held the parameter,
    // gradients and the sampler from the home rank, the RNG of a rank that
    // did not exist derived by the documented rule.
    const int captured = static_cast<int>(IntFlag("captured", world));
    std::vector<StateDump> at_capture(static_cast<size_t>(captured));
    for (int r = 0; r < captured; ++r) {
      std::ifstream in(dumps + "/captured-" + std::to_string(r), std::ios::binary);
      std::stringstream bytes;
      bytes << in.rdbuf();
      if (!trainsnap::dist_test::DecodeDump(bytes.str(), &at_capture[static_cast<size_t>(r)])) {
        Fail("dump", Status::Corruption("dump of rank " + std::to_string(r)));
      }
    }
    const int home = rank < captured ? rank : rank % captured;
    StateDump expected;
    for (const auto& [key, value] : at_capture[0]) {
      if (key.rfind("param/", 0) == 0) expected[key] = value;
    }
    for (const auto& [key, value] : at_capture[static_cast<size_t>(home)]) {
      if (key.rfind("grad/", 0) == 0 || key == "sampler") expected[key] = value;
    }
    for (const auto& group_params : job.optimizer->param_groups()) {
      for (const torch::Tensor& param : group_params.params()) {
        std::string name;
        for (const auto& item : job.net->named_parameters()) {
          if (item.value().is_same(param)) name = item.key();
        }
        for (const StateDump& d : at_capture) {
          if (!d.count("opt/" + name + "/step")) continue;
          for (const char* part : {"/step", "/exp_avg", "/exp_avg_sq"})
            expected["opt/" + name + part] = d.at("opt/" + name + part);
        }
      }
    }
    const std::string& home_rng = at_capture[static_cast<size_t>(home)].at("rng/cpu");
    if (rank < captured) {
      expected["rng/cpu"] = home_rng;
    } else {
      at::Generator derived = at::make_generator<at::CPUGeneratorImpl>();
      derived.set_current_seed(XXH3_64bits_withSeed(home_rng.data(), home_rng.size(), static_cast<uint64_t>(rank)));
      torch::Tensor bytes = derived.get_state();
      expected["rng/cpu"] = std::string(static_cast<const char*>(bytes.data_ptr()), bytes.nbytes());
    }
    const std::string difference = trainsnap::dist_test::FirstDifference(expected, dump());
    Put("first_difference", difference.empty() ? "-" : difference);
    Put("compared", std::to_string(expected.size()));
    // Training goes on at this world size; then the rest of the epoch.
    sampler.reset();  // as a DataLoader's begin() does: resumes the loaded position
    for (int64_t step = *latest + 1; step <= *latest + 3; ++step) {
      job.Step(step);
      take();
      Status captured_again = checkpointer->Capture(step, state);
      if (!captured_again.ok()) Fail("capture after the restore", captured_again);
    }
    while (take()) {
    }
    Put("taken", taken);
    auto listed = checkpointer->Steps();
    if (!listed.ok()) Fail("steps", listed.status());
    Put("steps", Join(*listed));
    return 0;
  }

  if (scenario == "stop") {
    // A CaptureAsync per step, its handle dropped; after step --bad_step,
    // rank --bad's replica of l1.weight drifts. The replica check (on by
    // default) fails that step on every rank, and the next CaptureAsync
    // returns that error on every rank: the loop stops there everywhere.
    const int bad = static_cast<int>(IntFlag("bad", 1));
    const int64_t bad_step = IntFlag("bad_step", 4);
    Job job(group, false);
    auto checkpointer = OpenOrFail(group, options);
    int64_t stopped = -1;
    Status error;
    for (int64_t step = 1; step <= 8; ++step) {
      job.Step(step);
      if (step == bad_step && rank == bad) {
        torch::NoGradGuard no_grad;
        job.net->l1->weight.view(-1)[3].add_(1e-3);
      }
      auto handle = checkpointer->CaptureAsync(step, job.State());
      if (!handle.ok()) {
        stopped = step;
        error = handle.status();
        break;
      }
    }
    Put("stopped_at", std::to_string(stopped));
    PutStatus("stop_", error);
    PutStatus("flush_", checkpointer->Flush());
    auto listed = checkpointer->Steps();
    if (!listed.ok()) Fail("steps", listed.status());
    Put("steps", Join(*listed));
    return 0;
  }

  if (scenario == "sampled") {
    // The replica check's sample (replica_check_stride --stride): one
    // Linear(2048, 1024), no optimizer: 9 blocks of 1 MiB, the bias's (4 KiB)
    // first. Rank --bad's weight differs in one element of a block that step
    // 1's sample misses (unless the stride is 1). Captures of the same state
    // at steps 1, 2, ... until one fails: the first whose sample holds that
    // block (reported here too, from the sample's rule).
    options.checkpointer.model_state = trainsnap::ModelState::kFull;
    options.replica_check_stride = static_cast<int>(IntFlag("stride", 32));
    const int bad = static_cast<int>(IntFlag("bad", 1));
    torch::manual_seed(13);
    torch::nn::Sequential net(torch::nn::Linear(2048, 1024));
    uint64_t bytes = 0;
    for (const torch::Tensor& p : net->parameters()) bytes += p.nbytes();
    const uint64_t stride = trainsnap::internal::SampleStride(bytes, options.replica_check_stride);
    // Of them all, in the weight (block 0 is the bias's).
    const uint64_t block = 1 + (trainsnap::internal::SampleOffset(1, stride) + 1) % stride;
    if (rank == bad) {
      torch::NoGradGuard no_grad;
      const int64_t floats = trainsnap::internal::kReplicaHashBlock / sizeof(float);
      net[0]->as<torch::nn::Linear>()->weight.view(-1)[static_cast<int64_t>(block - 1) * floats + 3].add_(1e-3);
    }
    TrainingState state;
    state.model = net.ptr().get();
    int64_t expected = 1;
    while (trainsnap::internal::SampleOffset(expected, stride) != block % stride) ++expected;
    Put("sample_stride", std::to_string(stride));
    Put("expected_step", std::to_string(expected));
    {  // A stride below 1 is refused before anything is created (no collective either).
      DistributedOptions zero = options;
      zero.replica_check_stride = 0;
      const std::string refused_dir = Flag("run_dir") + "-refused";
      PutStatus("zero_stride_", DistributedCheckpointer::Open(refused_dir, group, zero).status());
      Put("refused_dir_exists", std::filesystem::exists(refused_dir) ? "1" : "0");
    }
    auto checkpointer = OpenOrFail(group, options);
    int64_t failed = -1;
    for (int64_t step = 1; step <= 200 && failed < 0; ++step) {
      Status captured = checkpointer->Capture(step, state);
      if (captured.ok()) continue;
      failed = step;
      PutStatus("failed_", captured);
    }
    Put("failed_at", std::to_string(failed));
    auto listed = checkpointer->Steps();
    if (!listed.ok()) Fail("steps", listed.status());
    Put("global_steps", std::to_string(listed->size()));
    return 0;
  }

  std::fprintf(stderr, "unknown scenario `%s`\n", scenario.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string name = argv[i];
    if (name.rfind("--", 0) == 0) flags[name.substr(2)] = argv[i + 1];
  }
  out.open(Flag("out"), std::ios::trunc);
  try {
    return Run();
  } catch (const std::exception& e) {
    Put("error", std::string("exception: ") + e.what());
    std::fprintf(stderr, "rank %s: exception: %s\n", Flag("rank").c_str(), e.what());
    return 4;
  }
}
