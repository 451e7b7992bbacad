#include "store/kill_point.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace trainsnap::internal {
namespace {

struct KillState {
  std::mutex mu;
  std::string name;     // guarded by mu
  uint64_t left = 0;    // hits to go before the kill; guarded by mu
};

KillState& State() {
  static KillState* state = new KillState();  // never destroyed: used until exit
  return *state;
}

std::atomic<bool> armed{false};
std::once_flag env_once;

void ArmFromEnvironment() {
  const char* spec = std::getenv("TRAINSNAP_KILL_POINT");
  if (spec == nullptr || *spec == '\0') return;
  std::string name(spec);
  uint64_t nth = 1;
  const auto colon = name.rfind(':');
  if (colon != std::string::npos) {
    nth = std::strtoull(name.c_str() + colon + 1, nullptr, 10);
    name.resize(colon);
  }
  ArmKillPoint(name, nth == 0 ? 1 : nth);
}

}  // namespace

bool KillPointsCompiled() {
#if defined(TRAINSNAP_KILL_POINTS)
  return true;
#else
  return false;
#endif
}

void ArmKillPoint(const std::string& name, uint64_t nth) {
  KillState& st = State();
  std::lock_guard<std::mutex> lock(st.mu);
  st.name = name;
  st.left = nth;
  armed.store(true, std::memory_order_release);
}

void DisarmKillPoints() {
  KillState& st = State();
  std::lock_guard<std::mutex> lock(st.mu);
  st.left = 0;
  armed.store(false, std::memory_order_release);
}

void MaybeKill(const char* name) {
  std::call_once(env_once, ArmFromEnvironment);
  if (!armed.load(std::memory_order_acquire)) return;
  KillState& st = State();
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.left == 0 || st.name != name) return;
  if (--st.left > 0) return;
  // SIGKILL cannot be caught: nothing (no destructor, no atexit, no RocksDB
  // shutdown) runs after this point, as in a real crash.
  ::kill(::getpid(), SIGKILL);
  ::pause();
}

}  // namespace trainsnap::internal
