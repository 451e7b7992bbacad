// The one place where rocksdb::Status becomes trainsnap::Status.
#pragma once

#include <string_view>

#include <rocksdb/status.h>

#include "trainsnap/status.h"

namespace trainsnap::internal {

// NoSpace -> kNoSpace, Corruption -> kCorruption, NotFound -> kNotFound,
// Busy/TimedOut/TryAgain -> kBusy, lock-file IOError -> kBusy naming `path`,
// other IOError -> kIOError, InvalidArgument -> kInvalidArgument,
// NotSupported -> kNotSupported, Aborted/Incomplete/ShutdownInProgress ->
// kAborted. `context` is prepended to the message.
Status FromRocks(const rocksdb::Status& s, std::string_view context, std::string_view path = {});

}  // namespace trainsnap::internal
