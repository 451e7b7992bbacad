// trainsnap: inspect and repair trainsnap checkpoint stores. See docs/cli.md.
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/exit_code.h"
#include "cli/standard_output.h"

namespace {

using trainsnap::Status;
using trainsnap::cli::Command;
using trainsnap::cli::ExitCode;

constexpr const char* kFooter =
    "Exit codes: 0 ok, 1 error, 2 usage or invalid argument, 3 corruption found,\n"
    "4 store or step not found, 5 store held by a writer. Reading commands work\n"
    "while a training run writes the store; --json output is documented in docs/cli.md.";

int Fail(const std::string& command, const Status& status) {
  std::fprintf(stderr, "%s\n", trainsnap::cli::ErrorLine(command, status).c_str());
  return static_cast<int>(trainsnap::cli::ExitCodeFor(status));
}

std::string CommandNames(const std::vector<Command>& commands) {
  std::string names;
  for (const Command& c : commands) names += (names.empty() ? "" : ", ") + c.app->get_name();
  return names;
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

  // The top level takes only flags (--help, --version), so the first other
  // word is the command; CLI11 alone would call an unknown one "A subcommand
  // is required" or an unexpected argument.
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (!word.empty() && word.front() == '-') continue;
    bool known = false;
    for (const Command& c : commands) known = known || c.app->check_name(word);
    if (!known) {
      return Fail("", Status::InvalidArgument("unknown command `" + word + "` (commands: " + CommandNames(commands) +
                                              "); see trainsnap --help"));
    }
    break;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0 that print on stdout.
    if (e.get_exit_code() == 0) {
      int code = app.exit(e);
      Status out = trainsnap::cli::CloseStdout();
      return out.ok() ? code : Fail("", out);
    }
    // Every real parse error exits 2 (CLI11's own codes vary by error kind),
    // with one line naming the command it concerns.
    std::string command;
    for (const Command& c : commands) {
      if (c.app->parsed()) command = c.app->get_name();
    }
    std::string hint = "; see trainsnap " + (command.empty() ? std::string() : command + " ") + "--help";
    std::fprintf(stderr, "%s\n",
                 trainsnap::cli::ErrorLine(command, Status::InvalidArgument(std::string("usage: ") + e.what() + hint))
                     .c_str());
    return static_cast<int>(ExitCode::kUsage);
  }

  for (const Command& command : commands) {
    if (!command.app->parsed()) continue;
    const std::string name = command.app->get_name();
    Status status;
    try {
      status = command.run();
    } catch (const std::exception& e) {  // std::bad_alloc included: nothing escapes as a crash
      status = Status::Aborted(std::string("unexpected error: ") + e.what());
    }
    // A report that did not reach stdout is a failure too; a command's own
    // error comes first (it already says what happened).
    Status out = trainsnap::cli::CloseStdout();
    if (!status.ok()) return Fail(name, status);
    if (!out.ok()) return Fail(name, out);
    return 0;
  }
  return Fail("", Status::InvalidArgument("no command given; see trainsnap --help"));
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
