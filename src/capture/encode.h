// Encode and commit, the last two steps of a capture (stage -> encode ->
// commit). They read only the StagedSnapshot, never the live objects, so they
// may run on another thread while training continues.
#pragma once

#include "capture/stage.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

// Chunks, hashes, dedups and compresses every staged tensor into `writer`.
Status EncodeTensors(const StagedSnapshot& snapshot, SnapshotWriter& writer);

// Attaches the manifest and commits the snapshot atomically.
Result<SnapshotInfo> CommitStaged(const StagedSnapshot& snapshot, SnapshotWriter& writer);

}  // namespace trainsnap::internal
