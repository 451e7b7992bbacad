// CreationMarker: what makes a store's creation atomic to every later open
// (docs/format.md, "Creation"). A writable open that creates a store first
// writes TRAINSNAP_CREATING into the directory, synced, and holds an flock on
// it; it removes the marker, synced, only once everything a store holds
// exists (column families, meta record, packs/, commit log). So a directory
// is absent or empty (nothing was created), a store, or holds the marker: a
// creation that was interrupted (no lock holder) or is running (locked).
// An interrupted creation holds no snapshot: the open that created it never
// returned, so nothing could commit.
#pragma once

#include <memory>
#include <string>

#include "trainsnap/status.h"

namespace trainsnap::internal {

inline constexpr char kCreationMarker[] = "TRAINSNAP_CREATING";

enum class CreationState {
  kNone,         // no marker: not a store being created
  kRunning,      // another process holds the marker's lock
  kInterrupted,  // a marker nobody holds: the creation stopped half way
};

// The state of `dir`'s creation. IOError when the marker exists and cannot
// be opened or locked for another reason than a holder.
Result<CreationState> InspectCreation(const std::string& dir);

// The message of an open that meets an interrupted creation (`what`: "open
// store P read-only", ...): NotFound, saying that the store holds nothing
// yet and how the creation is finished.
Status InterruptedCreation(const std::string& what);

class CreationMarker {
 public:
  // Writes the marker into `dir` (an existing directory), or takes over an
  // interrupted creation's, and locks it: Busy when another process holds
  // it. The marker and the directory are synced before it returns.
  static Result<std::unique_ptr<CreationMarker>> Acquire(const std::string& dir);
  ~CreationMarker();  // unlocks; the marker stays unless Finish ran
  CreationMarker(const CreationMarker&) = delete;
  CreationMarker& operator=(const CreationMarker&) = delete;

  // Removes every file an interrupted creation leaves (RocksDB's files,
  // packs/ with its pack files, the commit log, the reserve file), all but
  // the marker. NotSupported, before anything is removed, when the
  // directory holds a name no creation writes (it is somebody's data);
  // `*removed` counts the entries removed.
  Status ClearLeftovers(size_t* removed);
  // Removes the marker and syncs the directory: the store is created.
  Status Finish();

 private:
  CreationMarker(std::string dir, int fd) : dir_(std::move(dir)), fd_(fd) {}
  std::string dir_;
  int fd_ = -1;
};

}  // namespace trainsnap::internal
