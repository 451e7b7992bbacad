// Version of proto::TrainingManifest written by this build. Bump it when a
// change to manifest.proto or to the tensor roles changes what restore must do;
// restore refuses every other version.
#pragma once

#include <cstdint>

namespace trainsnap::internal {

// 2: a layout shared by snapshots plus a small per-snapshot part
// (proto/manifest.proto, SnapshotManifest; src/torch/manifest_codec.h).
// Version 1 stored the whole TrainingManifest in each snapshot record.
inline constexpr uint32_t kManifestFormatVersion = 2;

}  // namespace trainsnap::internal
