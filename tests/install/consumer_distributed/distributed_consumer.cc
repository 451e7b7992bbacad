// A one-rank DistributedCheckpointer through the installed package: a Gloo
// group over a FileStore, a capture, a restore into a differently
// initialised model (bitwise), and the global steps.
#include <cstdio>
#include <cstring>
#include <string>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/torch.h>

#include "trainsnap/distributed.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string run_dir = argv[1];
  auto store = c10::make_intrusive<c10d::FileStore>(run_dir + ".rendezvous", 1);
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, 0, 1, options);
  trainsnap::DistributedOptions dist;
  dist.store.sync = false;
  dist.store.reserve_bytes = 0;
  auto opened = trainsnap::DistributedCheckpointer::Open(run_dir, group, dist);
  if (!opened.ok()) {
    std::fprintf(stderr, "open: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  trainsnap::DistributedCheckpointer& checkpointer = **opened;
  torch::manual_seed(7);
  torch::nn::Linear source(4, 3);
  trainsnap::TrainingState state;
  state.model = source.get();
  state.rng = false;
  if (auto s = checkpointer.Capture(1, state); !s.ok()) {
    std::fprintf(stderr, "capture: %s\n", s.ToString().c_str());
    return 1;
  }
  torch::manual_seed(8);
  torch::nn::Linear target(4, 3);
  trainsnap::TrainingState into;
  into.model = target.get();
  into.rng = false;
  auto restored = checkpointer.RestoreLatest(into);
  if (!restored.ok() || *restored != 1) {
    std::fprintf(stderr, "restore: %s\n", restored.status().ToString().c_str());
    return 1;
  }
  if (!torch::equal(source->weight, target->weight) || !torch::equal(source->bias, target->bias)) {
    std::fprintf(stderr, "restored parameters differ\n");
    return 1;
  }
  auto steps = checkpointer.Steps();
  if (!steps.ok() || *steps != std::vector<int64_t>{1}) {
    std::fprintf(stderr, "steps: %s\n", steps.status().ToString().c_str());
    return 1;
  }
  std::printf("distributed consumer: OK\n");
  return 0;
}
