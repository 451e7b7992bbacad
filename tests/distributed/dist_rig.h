// The rank side of the distributed tests: a process group on 127.0.0.1, a
// small data-parallel training job (MLP with dropout, AdamW, gradient
// allreduce; optionally a ZeRO-1 sharded optimizer) and a bitwise dump of a
// rank's whole training state. Used by trainsnap_dist_rank (one process per
// rank), never by the gtest process itself: ranks are exec'ed before any
// store is opened.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <vector>

#include "trainsnap/distributed.h"

namespace trainsnap::dist_test {

// A rank's training state by name, as raw bytes: "param/<name>",
// "grad/<name>", "opt/<name>/step", "opt/<name>/exp_avg",
// "opt/<name>/exp_avg_sq" (for the parameters this rank's optimizer holds
// state of) and "rng/cpu".
using StateDump = std::map<std::string, std::string>;
std::string EncodeDump(const StateDump& dump);
bool DecodeDump(const std::string& bytes, StateDump* dump);
// The first key whose bytes differ (or that only one side has); "" when equal.
std::string FirstDifference(const StateDump& expected, const StateDump& actual);

// FileStore rendezvous at `file` + a Gloo group bound to 127.0.0.1.
c10::intrusive_ptr<c10d::ProcessGroup> MakeGroup(const std::string& file, int rank, int world,
                                                 std::chrono::milliseconds timeout);

class NetImpl : public torch::nn::Module {
 public:
  explicit NetImpl(int64_t width);
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Linear l1{nullptr}, l2{nullptr}, l3{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(Net);

// One rank of a data-parallel job. The model starts equal on every rank
// (seeded by `seed`), the dropout RNG differs per rank, and the batch of
// step s on rank r depends only on (seed, s, r).
class Job {
 public:
  Job(c10::intrusive_ptr<c10d::ProcessGroup> group, bool sharded, int64_t width = 32, uint64_t seed = 7);
  // Forward/backward on this rank's batch, gradient allreduce (mean), then
  // the optimizer step: all of it, or (sharded) this rank's shard followed
  // by a broadcast of every parameter from its owner.
  void Step(int64_t step);
  TrainingState State();
  // Every parameter, the optimizer state this rank holds and the CPU RNG
  // state, as raw bytes: equal dumps = bitwise equal training states.
  std::string Dump();
  // The same and the gradients, by name.
  StateDump NamedDump();

  Net net{nullptr};
  std::unique_ptr<torch::optim::AdamW> optimizer;

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  const bool sharded_;
  const uint64_t seed_;
};

}  // namespace trainsnap::dist_test
