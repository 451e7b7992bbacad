#include "capture/encode.h"

#include <string>
#include <utility>

#include "torch/manifest_codec.h"

namespace trainsnap::internal {

Status EncodeTensors(const StagedSnapshot& snapshot, SnapshotWriter& writer) {
  // The writer's errors name the tensor by TensorView::name.
  for (const StagedTensor& staged : snapshot.staging.tensors()) {
    TRAINSNAP_RETURN_IF_ERROR(writer.AddTensor(ViewOf(staged)));
  }
  for (const UnchangedTensor& unchanged : snapshot.unchanged) {
    Status added = writer.AddTensorRecord(unchanged.record);
    if (!added.ok()) {  // named on failure only: a heap string per tensor otherwise
      return added.WithContext("tensor `" + unchanged.name + "` role " + unchanged.role + ", unchanged since step " +
                               std::to_string(unchanged.from_step));
    }
  }
  return Status::OK();
}

Result<SnapshotInfo> CommitStaged(StagedSnapshot& snapshot, SnapshotWriter& writer) {
  // The layout goes into the store's shared manifest: stored once while it
  // does not change (manifest format version 2, docs/format.md).
  TRAINSNAP_ASSIGN_OR_RETURN(EncodedManifest encoded, EncodeManifest(std::move(snapshot.manifest)));
  writer.SetManifest(std::move(encoded.own));
  writer.SetSharedManifest(std::move(encoded.layout));
  return writer.Commit();
}

}  // namespace trainsnap::internal
