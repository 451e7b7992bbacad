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
//   trainsnap_resume_child --store DIR --workload gan --ack-fd FD --go-fd FD
//
// Exit codes: 0 all micro-steps done, 2 usage, 3 a trainsnap or training error.
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <torch/torch.h>

#include "resume/gan_workload.h"
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

// Runs `run` from the start to `total` steps with a snapshot after each.
template <class Run>
Status Train(Store& store, Run& run, int64_t total, int ack_fd, int go_fd) {
  Checkpointer checkpointer(store);
  torch::manual_seed(kTrainSeed);
  while (run.cursor().position() < total) {
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

Status Main(const std::string& store_path, const std::string& workload, const std::string& optimizer, int ack_fd,
            int go_fd) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(store_path));
  if (workload == "gan") {
    GanRun run(kTrainSeed);
    return Train(*store, run, kGanSteps, ack_fd, go_fd);
  }
  TRAINSNAP_ASSIGN_OR_RETURN(OptimizerKind kind, ParseOptimizerKind(optimizer));
  LoraRun run(kind, kTrainSeed);
  return Train(*store, run, kTotalMicroSteps, ack_fd, go_fd);
}

}  // namespace
}  // namespace trainsnap::internal

int main(int argc, char** argv) {
  using namespace trainsnap::internal;  // NOLINT: test helper binary
  std::string store_path, optimizer, workload = "lora";
  int ack_fd = -1, go_fd = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--store") store_path = argv[i + 1];
    else if (flag == "--optimizer") optimizer = argv[i + 1];
    else if (flag == "--workload") workload = argv[i + 1];
    else if (flag == "--ack-fd") ack_fd = std::atoi(argv[i + 1]);
    else if (flag == "--go-fd") go_fd = std::atoi(argv[i + 1]);
  }
  if (store_path.empty() || ack_fd < 0 || go_fd < 0 || (workload != "lora" && workload != "gan")) {
    std::fprintf(stderr, "usage: %s --store DIR [--workload lora|gan] [--optimizer NAME] --ack-fd FD --go-fd FD\n",
                 argv[0]);
    return 2;
  }
  // The reference runs with one intra-op thread too: reduction order, and so
  // the bits of a result, may depend on the thread count.
  torch::set_num_threads(1);
  trainsnap::Status status = Main(store_path, workload, optimizer, ack_fd, go_fd);
  if (!status.ok()) {
    std::fprintf(stderr, "trainsnap_resume_child: %s\n", status.ToString().c_str());
    return 3;
  }
  return 0;
}
