// The checkpointer's manifest on disk (manifest format version 2,
// proto/manifest.proto): a layout that snapshots share (the store's shared
// manifest, stored once while it does not change) and a small per-snapshot
// part (the store's manifest). No LibTorch: the CLI links it too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <google/protobuf/arena.h>

#include "manifest.pb.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

struct EncodedManifest {
  std::string own;     // SnapshotManifest: for SnapshotWriter::SetManifest
  std::string layout;  // TrainingManifest without per-snapshot fields: SetSharedManifest
};

// Splits `manifest` (written as kManifestFormatVersion whatever its
// format_version). Equal layouts give byte-identical `layout` strings
// (deterministic serialization), so the store keeps one copy. Consumes
// `manifest`: it becomes the layout in place, so that a capture of 50k
// parameters does not copy its manifest. InvalidArgument when a message
// does not serialize.
Result<EncodedManifest> EncodeManifest(proto::TrainingManifest&& manifest);

// Joins a snapshot's manifest and its shared manifest back into one
// TrainingManifest (format_version kManifestFormatVersion). Corruption when
// a part does not parse, there is no layout, the layout's version differs,
// or the per-snapshot part does not fit the layout (run lengths, unknown
// gradient states, optimizer, group or extra counts); NotSupported naming
// the version when `own`'s is not kManifestFormatVersion (version 1 stored
// the whole TrainingManifest in the snapshot's manifest; no store this
// build opens holds one written by a checkpointer).
Result<proto::TrainingManifest> DecodeManifest(std::string_view own, std::string_view layout);
// The same into `out` (empty; it may live on an arena). On error `out` holds
// whatever was parsed so far.
Status DecodeManifest(std::string_view own, std::string_view layout, proto::TrainingManifest* out);

// Store::Manifest + Store::SharedManifest + DecodeManifest. The store's
// errors pass through (NotFound for a missing step, Corruption naming a
// missing or damaged shared-manifest chunk).
Result<proto::TrainingManifest> ReadManifest(Store& store, int64_t step);
Status ReadManifest(Store& store, int64_t step, proto::TrainingManifest* out);

// Options of the arena a capture or restore keeps its manifest in (a few
// large blocks instead of several allocations per tensor, freed at once):
// allocated one by one, the messages of 150,000 tensors left glibc's fast
// bins full of small chunks, merged later on the training thread.
google::protobuf::ArenaOptions ManifestArenaOptions();

}  // namespace trainsnap::internal
