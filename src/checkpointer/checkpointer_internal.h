// The two phases of Checkpointer::Restore, for a caller that decides between
// them: DistributedCheckpointer prepares on every rank, agrees, and applies
// on every rank or on none.
#pragma once

#include <cstdint>
#include <memory>

#include "restore/restore_snapshot.h"
#include "trainsnap/checkpointer.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

class CheckpointerInternal {
 public:
  // Checkpointer::Restore up to the phase boundary
  // (restore/restore_snapshot.h), with its errors and their "restore step N"
  // context; no exception escapes. RestoreOptions::discard_later is
  // InvalidArgument here (the caller deletes at the boundary itself). Apply and
  // Abandon the result on the same thread, before the next call of this
  // Checkpointer.
  static Result<std::unique_ptr<PreparedRestore>> PrepareRestore(Checkpointer& checkpointer, int64_t step,
                                                                 const TrainingState& target,
                                                                 const RestoreOptions& options,
                                                                 const SnapshotInput& input = {});
};

}  // namespace trainsnap::internal
