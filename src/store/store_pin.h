// StorePin: marks a Store as in use by work that runs on other threads than
// its owner's (a Checkpointer's captures in flight). The owner destroying a
// pinned Store would leave that work writing into freed memory; the store's
// destructor calls AbortIfPinned, which aborts the process instead, with a
// message naming the store and the user.
#pragma once

#include <map>
#include <string>

#include "trainsnap/store.h"

namespace trainsnap::internal {

// Thread-safe. Pins `store` from construction to destruction.
class StorePin {
 public:
  // `user` says who holds the pin, for the abort message ("capture step 7").
  StorePin(const Store* store, std::string user);
  ~StorePin();
  StorePin(const StorePin&) = delete;
  StorePin& operator=(const StorePin&) = delete;

 private:
  std::multimap<const Store*, std::string>::iterator entry_;
};

// Called first by a Store's destructor: when `store` is pinned, writes
// "trainsnap: Store <path> destroyed while ..." to stderr and aborts.
void AbortIfPinned(const Store* store, const std::string& path);

}  // namespace trainsnap::internal
