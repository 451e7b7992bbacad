#include "capture/encode.h"

#include <string>

namespace trainsnap::internal {

Status EncodeTensors(const StagedSnapshot& snapshot, SnapshotWriter& writer) {
  for (const StagedTensor& staged : snapshot.staging.tensors()) {
    const std::string name = staged.name.empty() ? std::to_string(staged.param_id) : staged.name;
    TRAINSNAP_RETURN_IF_ERROR(
        writer.AddTensor(ViewOf(staged)).WithContext("tensor `" + name + "` role " + staged.role));
  }
  for (const UnchangedTensor& unchanged : snapshot.unchanged) {
    TRAINSNAP_RETURN_IF_ERROR(writer.AddTensorRecord(unchanged.record)
                                  .WithContext("tensor `" + unchanged.name + "` role " + unchanged.role +
                                               ", unchanged since step " + std::to_string(unchanged.from_step)));
  }
  return Status::OK();
}

Result<SnapshotInfo> CommitSnapshot(const StagedSnapshot& snapshot, SnapshotWriter& writer) {
  std::string bytes;
  if (!snapshot.manifest.SerializeToString(&bytes)) {
    return Status::InvalidArgument("manifest does not serialize");
  }
  writer.SetManifest(std::move(bytes));
  return writer.Commit();
}

}  // namespace trainsnap::internal
