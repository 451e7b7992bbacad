// How every command opens a store and finds a step, with the errors the tool
// documents: NotFound for a missing store or step, Busy for a held store.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "trainsnap/store.h"

namespace trainsnap::cli {

// Reading commands: a read-only open that works while a trainer writes.
Result<std::unique_ptr<Store>> OpenForReading(const std::string& path);
// Mutating commands: a writable open that never creates a store. Busy when
// another process (a training run) holds it.
Result<std::unique_ptr<Store>> OpenForWriting(const std::string& path);
// The snapshot's info; NotFound naming the step and the store otherwise.
Result<SnapshotInfo> RequireStep(Store& store, int64_t step);

}  // namespace trainsnap::cli
