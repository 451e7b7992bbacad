#include "capture/encode.h"

#include <string>

namespace trainsnap::internal {

Status EncodeTensors(const StagedSnapshot& snapshot, SnapshotWriter& writer) {
  // The writer's errors name the tensor by TensorView::name.
  for (const StagedTensor& staged : snapshot.staging.tensors()) {
    TRAINSNAP_RETURN_IF_ERROR(writer.AddTensor(ViewOf(staged)));
  }
  for (const UnchangedTensor& unchanged : snapshot.unchanged) {
    TRAINSNAP_RETURN_IF_ERROR(writer.AddTensorRecord(unchanged.record)
                                  .WithContext("tensor `" + unchanged.name + "` role " + unchanged.role +
                                               ", unchanged since step " + std::to_string(unchanged.from_step)));
  }
  return Status::OK();
}

Result<SnapshotInfo> CommitStaged(const StagedSnapshot& snapshot, SnapshotWriter& writer) {
  std::string bytes;
  if (!snapshot.manifest.SerializeToString(&bytes)) {
    return Status::InvalidArgument("manifest does not serialize");
  }
  writer.SetManifest(std::move(bytes));
  return writer.Commit();
}

}  // namespace trainsnap::internal
