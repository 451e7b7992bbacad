// Version of proto::TrainingManifest written by this build. Bump it when a
// change to manifest.proto or to the tensor roles changes what restore must do;
// restore refuses every other version.
#pragma once

#include <cstdint>

namespace trainsnap::internal {

inline constexpr uint32_t kManifestFormatVersion = 1;

}  // namespace trainsnap::internal
