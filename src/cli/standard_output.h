// Whether what the tool printed reached its standard output. A command's
// report that could not be written (`> /dev/full`, a closed pipe end, a full
// disk) is a failure, exit code 1, never a silent success.
#pragma once

#include "trainsnap/status.h"

namespace trainsnap::cli {

// Flushes std::cout and stdout (they share stdio's buffer) and checks that
// everything written so far was written: IOError naming the cause otherwise
// ("write to standard output: No space left on device"). The error is sticky:
// once a write failed, every later call fails too.
Status FlushStdout();
// FlushStdout, then closes stdout, so that an error reported only at close
// is seen too. Called once by main() after the command; prints nothing.
Status CloseStdout();

}  // namespace trainsnap::cli
