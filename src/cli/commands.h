// The tool's subcommands. Each Add*Command registers its CLI11 subcommand
// and returns how to run it once the whole command line has parsed. A
// command prints its result on stdout (a table, or JSON with --json) and
// returns its status; main() turns that into the one-line error on stderr
// and the exit code (exit_code.h).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "trainsnap/status.h"

namespace trainsnap::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<Status()> run;
};

Command AddListCommand(CLI::App& parent);
Command AddShowCommand(CLI::App& parent);
Command AddDiffCommand(CLI::App& parent);
Command AddVerifyCommand(CLI::App& parent);
Command AddRollbackCommand(CLI::App& parent);
Command AddDeleteCommand(CLI::App& parent);
Command AddPruneCommand(CLI::App& parent);
Command AddGcCommand(CLI::App& parent);
Command AddExportCommand(CLI::App& parent);
Command AddStatsCommand(CLI::App& parent);

}  // namespace trainsnap::cli
