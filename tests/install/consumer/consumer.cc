// Captures a tiny model through the installed library, restores it into a
// differently initialised copy and checks bitwise equality.
#include <cstdio>

#include <torch/torch.h>

#include "trainsnap/checkpointer.h"
#include "trainsnap/store.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto store = trainsnap::Store::Open(argv[1]);
  if (!store.ok()) {
    std::fprintf(stderr, "open: %s\n", store.status().ToString().c_str());
    return 1;
  }
  torch::manual_seed(7);
  torch::nn::Linear source(4, 3);
  trainsnap::Checkpointer checkpointer(**store);
  trainsnap::TrainingState state;
  state.model = source.get();
  if (auto s = checkpointer.Capture(1, state); !s.ok()) {
    std::fprintf(stderr, "capture: %s\n", s.ToString().c_str());
    return 1;
  }
  torch::manual_seed(8);
  torch::nn::Linear target(4, 3);
  trainsnap::TrainingState into;
  into.model = target.get();
  if (auto s = checkpointer.Restore(1, into); !s.ok()) {
    std::fprintf(stderr, "restore: %s\n", s.ToString().c_str());
    return 1;
  }
  bool same = torch::equal(source->weight, target->weight) && torch::equal(source->bias, target->bias);
  std::printf("cmake consumer: restored bitwise: %s\n", same ? "yes" : "no");
  return same ? 0 : 1;
}
