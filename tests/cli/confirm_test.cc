#include "cli/confirm.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "terminal.h"
#include "testing/status_matchers.h"

namespace trainsnap::cli {
namespace {

using cli_test::Pipe;
using cli_test::ScopedFd;
using cli_test::Terminal;

constexpr char kNeedsYes[] = "confirmation required but stdin is not a terminal; pass --yes";
constexpr char kCancelled[] = "cancelled; nothing was changed";

// stdin from /dev/null: not a terminal.
class NoTerminal {
 public:
  NoTerminal() : null_(open("/dev/null", O_RDONLY)), stdin_(STDIN_FILENO, null_) {}
  ~NoTerminal() { close(null_); }

 private:
  int null_;
  ScopedFd stdin_;
};

TEST(ConfirmTest, WithoutATerminalRefusesUnlessAssumedYes) {
  NoTerminal no_terminal;
  Pipe err(STDERR_FILENO);
  const Status refused = Confirm("Delete 3 snapshots?", /*assume_yes=*/false);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(), kNeedsYes);
  const Status can = CanConfirm(false);
  EXPECT_EQ(can.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(can.message(), kNeedsYes);
  EXPECT_OK(Confirm("Delete 3 snapshots?", /*assume_yes=*/true));
  EXPECT_OK(CanConfirm(true));
  EXPECT_EQ(err.Drain(), "");  // nothing was asked
}

TEST(ConfirmTest, OnATerminalAsksOnStderrAndTakesYInAnyCase) {
  for (const std::string answer : {"y", "Y", "yes", "YES", "yEs"}) {
    Terminal terminal({STDIN_FILENO, STDERR_FILENO});
    EXPECT_OK(CanConfirm(false));
    terminal.Type(answer + "\n");
    SCOPED_TRACE(answer);
    EXPECT_OK(Confirm("Delete 3 snapshots?", false));
    EXPECT_EQ(terminal.Shown(), "Delete 3 snapshots? [y/N] ");
  }
}

TEST(ConfirmTest, OnATerminalAnythingElseCancels) {
  for (const std::string answer : {"", "n", "no", "ye", "yes please", " y", "y "}) {
    Terminal terminal({STDIN_FILENO, STDERR_FILENO});
    terminal.Type(answer + "\n");
    const Status status = Confirm("Prune?", false);
    EXPECT_EQ(status.code(), StatusCode::kAborted) << "`" << answer << "`";
    EXPECT_EQ(status.message(), kCancelled) << "`" << answer << "`";
    EXPECT_EQ(terminal.Shown(), "Prune? [y/N] ");
  }
}

TEST(ConfirmTest, AssumedYesAsksNothingOnATerminal) {
  Terminal terminal({STDIN_FILENO, STDERR_FILENO});
  terminal.Type("n\n");  // would cancel, were it read
  EXPECT_OK(Confirm("Prune?", /*assume_yes=*/true));
  EXPECT_EQ(terminal.Shown(), "");
}

}  // namespace
}  // namespace trainsnap::cli
