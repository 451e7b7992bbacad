// Child of PackCompactionKillTest: opens the store at argv[1] and collects
// garbage (which compacts its packs). The test arms a compaction kill point
// through TRAINSNAP_KILL_POINT, so the child normally dies of SIGKILL there.
// Exit codes: 0 = the collection finished, 2 = usage, 3 = open failed,
// 4 = collection failed.
#include <cstdio>

#include "trainsnap/store.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  trainsnap::StoreOptions options;
  options.chunk_bytes = 4096;
  options.compress = false;
  options.reserve_bytes = 0;
  auto store = trainsnap::Store::Open(argv[1], options);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 3;
  }
  auto gc = (*store)->CollectGarbage();
  if (!gc.ok()) {
    std::fprintf(stderr, "%s\n", gc.status().ToString().c_str());
    return 4;
  }
  return 0;
}
