#include "store/store_pin.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <utility>

namespace trainsnap::internal {

namespace {

std::mutex pins_mu;
// A multimap: its iterators stay valid while other pins come and go.
std::multimap<const Store*, std::string>& Pins() {
  static auto* pins = new std::multimap<const Store*, std::string>();  // never destroyed: used at exit
  return *pins;
}

}  // namespace

StorePin::StorePin(const Store* store, std::string user) {
  std::lock_guard<std::mutex> lock(pins_mu);
  entry_ = Pins().emplace(store, std::move(user));
}

StorePin::~StorePin() {
  std::lock_guard<std::mutex> lock(pins_mu);
  Pins().erase(entry_);
}

void AbortIfPinned(const Store* store, const std::string& path) {
  std::string users;
  size_t count = 0;
  {
    std::lock_guard<std::mutex> lock(pins_mu);
    auto [begin, end] = Pins().equal_range(store);
    for (auto it = begin; it != end; ++it, ++count) users += (count ? ", " : "") + it->second;
  }
  if (count == 0) return;
  std::fprintf(stderr,
               "trainsnap: Store %s destroyed while a Checkpointer still has captures in flight (%s); "
               "call Checkpointer::Flush() or destroy the Checkpointer before its Store\n",
               path.c_str(), users.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace trainsnap::internal
