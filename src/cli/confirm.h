// Confirmation before destructive commands.
#pragma once

#include <string>

#include "trainsnap/status.h"

namespace trainsnap::cli {

// OK when `assume_yes`. Otherwise asks `question` [y/N] on the terminal when
// stdin is one: OK on "y"/"yes", Aborted on anything else. Without a terminal
// (a script, a pipe) it refuses with InvalidArgument (exit code 2) asking for
// --yes, so that nothing is ever deleted unconfirmed.
Status Confirm(const std::string& question, bool assume_yes);
// What Confirm returns without asking: OK when `assume_yes` or stdin is a
// terminal, its InvalidArgument otherwise. Checked before a preview is shown.
Status CanConfirm(bool assume_yes);

}  // namespace trainsnap::cli
