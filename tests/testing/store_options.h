// The store options of the test suites.
#pragma once

#include "trainsnap/store.h"

namespace trainsnap::testing {

// 4 KiB chunks (small tensors span several), 2 threads, the WAL synced per
// commit when `sync`, and no free-space reserve (tests copy their stores,
// and its 40 MiB would be copied as data; disk_full_test sets its own).
inline StoreOptions TestStoreOptions(bool sync = true) {
  StoreOptions options;
  options.chunk_bytes = 4096;
  options.sync = sync;
  options.threads = 2;
  options.reserve_bytes = 0;
  return options;
}

}  // namespace trainsnap::testing
