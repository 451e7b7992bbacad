// The one place where rocksdb::Status becomes trainsnap::Status.
#pragma once

#include <string_view>

#include <rocksdb/status.h>

#include "trainsnap/status.h"

namespace trainsnap::internal {

// NoSpace -> kNoSpace, Corruption -> kCorruption, PathNotFound (a file of
// the database missing) -> kCorruption, NotFound -> kNotFound,
// Busy/TimedOut/TryAgain -> kBusy, the LOCK file of `path` held by another
// writer -> kBusy naming `path`, other IOError (permission denied included)
// -> kIOError, InvalidArgument -> kInvalidArgument,
// NotSupported -> kNotSupported, Aborted/Incomplete/ShutdownInProgress ->
// kAborted. `context` is prepended to the message.
Status FromRocks(const rocksdb::Status& s, std::string_view context, std::string_view path = {});

}  // namespace trainsnap::internal
