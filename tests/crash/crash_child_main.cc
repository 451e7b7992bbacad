// The crash test's child: captures snapshots of MakeCrashState(step) in a
// loop, with garbage collection and rollbacks mixed in, and reports each
// event on a pipe only after it returned OK. Killed by its parent (or by a
// kill point armed through TRAINSNAP_KILL_POINT); it never exits by itself.
//   trainsnap_crash_child <store path> <first step> <report fd>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "crash/crash_state.h"
#include "store/kill_point.h"
#include "trainsnap/checkpointer.h"
#include "trainsnap/store.h"

namespace {

int report_fd = -1;

void Report(const std::string& line) {
  const std::string out = line + "\n";
  if (::write(report_fd, out.data(), out.size()) != static_cast<ssize_t>(out.size())) std::_Exit(3);
}

[[noreturn]] void Fail(const std::string& what, const trainsnap::Status& s) {
  Report("E " + what + ": " + s.ToString());
  std::_Exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace trainsnap;
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <store> <first step> <report fd>\n", argv[0]);
    return 1;
  }
  const std::string path = argv[1];
  const int64_t first = std::strtoll(argv[2], nullptr, 10);
  report_fd = std::atoi(argv[3]);
  torch::set_num_threads(1);
  StoreOptions options;
  options.sync = true;
  options.threads = 2;
  // The parent's clock for kills during the open (a store's creation).
  Report("O");
  auto store = Store::Open(path, options);
  if (!store.ok()) Fail("open", store.status());
  Checkpointer checkpointer(**store);
  for (int64_t step = first;; ++step) {
    Report("S " + std::to_string(step));
    testing::CrashState state = testing::MakeCrashState(step);
    TrainingState ts;
    ts.model = state.model.ptr().get();
    ts.optimizer = state.optimizer.get();
    ts.rng = false;
    Status s = checkpointer.Capture(step, ts);
    if (!s.ok()) Fail("capture step " + std::to_string(step), s);
    // Committed, not yet acknowledged: the parent must find it or not, whole.
    internal::MaybeKill("child.before_ack");
    Report("C " + std::to_string(step));
    if (step % 5 == 0) {
      auto gc = (*store)->CollectGarbage();
      if (!gc.ok()) Fail("collect garbage", gc.status());
      Report("G");
    }
    if (step % 9 == 0 && step - first >= 2) {
      const int64_t target = step - 2;
      Report("B " + std::to_string(target));
      Status r = (*store)->Rollback(target);
      if (!r.ok()) Fail("rollback to " + std::to_string(target), r);
      Report("R " + std::to_string(target));
    }
  }
}
