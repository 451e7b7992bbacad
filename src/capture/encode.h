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

// Attaches the manifest (split into the snapshot's part and the shared
// layout, src/torch/manifest_codec.h) and commits the snapshot atomically.
// Consumes snapshot.manifest (it becomes the layout in place).
Result<SnapshotInfo> CommitStaged(StagedSnapshot& snapshot, SnapshotWriter& writer);

}  // namespace trainsnap::internal
