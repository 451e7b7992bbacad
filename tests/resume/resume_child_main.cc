// The training process of the bit-exact resume test: trains the workload from
// the start and captures a snapshot after every micro-step (step = micro-step
// index). Around each Capture it writes 8 raw bytes to the acknowledgement
// pipe: ~step (negative) when Capture starts, step once it returned. Then it
// waits for one byte on the go pipe before the
// next micro-step (lock-step, so that the test knows how far it can get: at
// most one micro-step past the last byte it sent). The test SIGKILLs it at a
// moment of its choosing.
//
//   trainsnap_resume_child --store DIR --optimizer NAME --ack-fd FD --go-fd FD
//
// Exit codes: 0 all micro-steps done, 2 usage, 3 a trainsnap or training error.
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <torch/torch.h>

#include "resume/lora_workload.h"
#include "trainsnap/checkpointer.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {
namespace {

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool ReadByte(int fd) {
  char byte;
  for (;;) {
    ssize_t n = ::read(fd, &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    return n == 1;
  }
}

Status Train(const std::string& store_path, OptimizerKind kind, int ack_fd, int go_fd) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(store_path));
  Checkpointer checkpointer(*store);
  LoraRun run(kind, kTrainSeed);
  torch::manual_seed(kTrainSeed);
  while (run.cursor().position() < kTotalMicroSteps) {
    const int64_t step = run.cursor().position();
    TRAINSNAP_RETURN_IF_ERROR(run.MicroStep());
    const int64_t started = ~step;
    if (!WriteAll(ack_fd, &started, sizeof(started))) return Status::IOError("ack pipe write failed");
    TRAINSNAP_RETURN_IF_ERROR(checkpointer.Capture(step, run.State()).WithContext("capture"));
    if (!WriteAll(ack_fd, &step, sizeof(step))) return Status::IOError("ack pipe write failed");
    if (!ReadByte(go_fd)) return Status::Aborted("go pipe closed");
  }
  return Status::OK();
}

}  // namespace
}  // namespace trainsnap::internal

int main(int argc, char** argv) {
  using namespace trainsnap::internal;  // NOLINT: test helper binary
  std::string store_path, optimizer;
  int ack_fd = -1, go_fd = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--store") store_path = argv[i + 1];
    else if (flag == "--optimizer") optimizer = argv[i + 1];
    else if (flag == "--ack-fd") ack_fd = std::atoi(argv[i + 1]);
    else if (flag == "--go-fd") go_fd = std::atoi(argv[i + 1]);
  }
  auto kind = ParseOptimizerKind(optimizer);
  if (store_path.empty() || ack_fd < 0 || go_fd < 0 || !kind.ok()) {
    std::fprintf(stderr, "usage: %s --store DIR --optimizer NAME --ack-fd FD --go-fd FD\n", argv[0]);
    return 2;
  }
  // The reference runs with one intra-op thread too: reduction order, and so
  // the bits of a result, may depend on the thread count.
  torch::set_num_threads(1);
  trainsnap::Status status = Train(store_path, *kind, ack_fd, go_fd);
  if (!status.ok()) {
    std::fprintf(stderr, "trainsnap_resume_child: %s\n", status.ToString().c_str());
    return 3;
  }
  return 0;
}
