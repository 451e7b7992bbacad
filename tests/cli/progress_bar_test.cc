#include "cli/progress_bar.h"

#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "terminal.h"

namespace trainsnap::cli {
namespace {

using cli_test::Pipe;
using cli_test::Terminal;

constexpr char kErase[] = "\r\033[K";

TEST(ProgressBarTest, OnATerminalDrawsTheBarInPlaceAndErasesIt) {
  Terminal terminal({STDERR_FILENO});
  {
    ProgressBar bar("gc", /*bytes=*/false);
    EXPECT_TRUE(bar.enabled());
    bar.Update(0, 10);
    bar.Update(5, 10);  // within 100 ms of the last draw and not done: not redrawn
    EXPECT_EQ(terminal.Shown(), std::string(kErase) + "gc [" + std::string(30, '.') + "]   0%  0 / 10  ETA ?");
    bar.Update(10, 10);  // done: always drawn; nothing is left to do
    EXPECT_EQ(terminal.Shown(), std::string(kErase) + "gc [" + std::string(30, '#') + "] 100%  10 / 10  ETA 0:00");
    bar.Finish();
    EXPECT_EQ(terminal.Shown(), kErase);
    bar.Finish();  // nothing drawn since
    EXPECT_EQ(terminal.Shown(), "");
    bar.Update(3, 0);  // an empty total counts as done
    EXPECT_EQ(terminal.Shown(), std::string(kErase) + "gc [" + std::string(30, '#') + "] 100%  3 / 0  ETA 0:00");
  }  // the destructor erases it
  EXPECT_EQ(terminal.Shown(), kErase);
}

TEST(ProgressBarTest, ByteBarsUseIecUnitsAndTheCallbackDraws) {
  Terminal terminal({STDERR_FILENO});
  ProgressBar bar("verify", /*bytes=*/true);
  ProgressFn callback = bar.Callback();
  ASSERT_TRUE(static_cast<bool>(callback));
  callback(3 * 1024, 3 * 1024);
  EXPECT_EQ(terminal.Shown(),
            std::string(kErase) + "verify [" + std::string(30, '#') + "] 100%  3.00 KiB / 3.00 KiB  ETA 0:00");
  bar.Finish();
  EXPECT_EQ(terminal.Shown(), kErase);
}

TEST(ProgressBarTest, WithoutATerminalWritesNothingAndGivesNoCallback) {
  Pipe err(STDERR_FILENO);
  {
    ProgressBar bar("gc", /*bytes=*/false);
    EXPECT_FALSE(bar.enabled());
    EXPECT_FALSE(static_cast<bool>(bar.Callback()));
    bar.Update(0, 10);
    bar.Update(10, 10);
    bar.Finish();
  }
  EXPECT_EQ(err.Drain(), "");
}

}  // namespace
}  // namespace trainsnap::cli
