// trainsnap: inspect and repair trainsnap checkpoint stores. See docs/cli.md.
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/exit_code.h"

namespace {

using trainsnap::Status;
using trainsnap::cli::Command;
using trainsnap::cli::ExitCode;

constexpr const char* kFooter =
    "Exit codes: 0 ok, 1 error, 2 usage or invalid argument, 3 corruption found,\n"
    "4 store or step not found, 5 store held by a writer. Reading commands work\n"
    "while a training run writes the store; --json output is documented in docs/cli.md.";

int Fail(const std::string& command, const Status& status) {
  std::string message = status.message();
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';  // one line on stderr, always
  }
  std::fprintf(stderr, "trainsnap %s: %s\n", command.c_str(), message.c_str());
  return static_cast<int>(trainsnap::cli::ExitCodeFor(status));
}

int Main(int argc, char** argv) {
  CLI::App app{"trainsnap: inspect and repair trainsnap checkpoint stores.", "trainsnap"};
  app.footer(kFooter);
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("trainsnap ") + TRAINSNAP_VERSION);

  std::vector<Command> commands = {
      trainsnap::cli::AddListCommand(app),     trainsnap::cli::AddShowCommand(app),
      trainsnap::cli::AddDiffCommand(app),     trainsnap::cli::AddVerifyCommand(app),
      trainsnap::cli::AddRollbackCommand(app), trainsnap::cli::AddDeleteCommand(app),
      trainsnap::cli::AddPruneCommand(app),    trainsnap::cli::AddGcCommand(app),
      trainsnap::cli::AddExportCommand(app),   trainsnap::cli::AddStatsCommand(app),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0; every real parse
    // error exits 2 (CLI11's own codes vary by error kind).
    int code = app.exit(e);
    return code == 0 ? 0 : static_cast<int>(ExitCode::kUsage);
  }

  for (const Command& command : commands) {
    if (!command.app->parsed()) continue;
    const std::string name = command.app->get_name();
    try {
      Status status = command.run();
      return status.ok() ? 0 : Fail(name, status);
    } catch (const std::exception& e) {  // c10::Error included: nothing escapes as a crash
      return Fail(name, Status::Aborted(std::string("unexpected error: ") + e.what()));
    }
  }
  std::fprintf(stderr, "trainsnap: no command given; see trainsnap --help\n");
  return static_cast<int>(ExitCode::kUsage);
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
