#include "cli/table.h"

#include <gtest/gtest.h>

namespace trainsnap::cli {
namespace {

TEST(TableTest, AlignsColumnsToTheWidestCell) {
  Table table({{"NAME"}, {"SIZE", Align::kRight}});
  table.AddRow({"a", "1 B"});
  table.AddRow({"longer.name", "12.0 KiB"});
  table.AddSeparator();
  table.AddRow({"total", "12.0 KiB"});
  EXPECT_EQ(table.Render(),
            "NAME             SIZE\n"
            "---------------------\n"
            "a                 1 B\n"
            "longer.name  12.0 KiB\n"
            "---------------------\n"
            "total        12.0 KiB\n");
}

TEST(TableTest, MissingCellsRenderEmptyWithoutTrailingSpaces) {
  Table table({{"A"}, {"B"}});
  table.AddRow({"x"});
  EXPECT_EQ(table.Render(), "A  B\n----\nx\n");
}

TEST(TableTest, WidthCountsUtf8CodePoints) {
  EXPECT_EQ(DisplayWidth("abc"), 3u);
  EXPECT_EQ(DisplayWidth("\xc3\xa9t\xc3\xa9"), 3u);  // "été"
  Table table({{"N"}, {"V", Align::kRight}});
  table.AddRow({"\xc3\xa9", "1"});
  table.AddRow({"ab", "22"});
  EXPECT_EQ(table.Render(), "N    V\n------\n\xc3\xa9    1\nab  22\n");
}

}  // namespace
}  // namespace trainsnap::cli
