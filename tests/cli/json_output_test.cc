#include "cli/json_output.h"

#include <unistd.h>

#include <cmath>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "terminal.h"

namespace trainsnap::cli {
namespace {

TEST(JsonOutputTest, DocumentsNameTheirSchema) {
  EXPECT_EQ(JsonDocument("list").dump(), R"({"schema":"trainsnap.list/1"})");
  EXPECT_EQ(JsonDocument("run-prune").dump(), R"({"schema":"trainsnap.run-prune/1"})");
}

TEST(JsonOutputTest, SnapshotInfoFieldsAndRatios) {
  SnapshotInfo info;
  info.step = 12;
  info.created_unix_ms = 1'700'000'000'123;
  info.tensors = 3;
  info.logical_bytes = 4000;
  info.chunks = 5;
  info.stored_bytes = 1000;
  info.new_chunks = 2;
  info.new_bytes = 400;
  info.manifest_bytes = 77;
  EXPECT_EQ(SnapshotInfoJson(info).dump(),
            R"({"chunks":5,"compression_ratio":4.0,"created":"2023-11-14T22:13:20.123Z",)"
            R"("created_unix_ms":1700000000123,"dedup_ratio":2.5,"logical_bytes":4000,"manifest_bytes":77,)"
            R"("new_bytes":400,"new_chunks":2,"step":12,"stored_bytes":1000,"tensors":3})");
  // Nothing stored, nothing new: both ratios are undefined, hence null.
  SnapshotInfo empty;
  empty.step = -1;
  EXPECT_EQ(SnapshotInfoJson(empty).dump(),
            R"({"chunks":0,"compression_ratio":null,"created":"1970-01-01T00:00:00.000Z",)"
            R"("created_unix_ms":0,"dedup_ratio":null,"logical_bytes":0,"manifest_bytes":0,)"
            R"("new_bytes":0,"new_chunks":0,"step":-1,"stored_bytes":0,"tensors":0})");
}

TEST(JsonOutputTest, GcReportFields) {
  GcReport report;
  report.chunks_scanned = 10;
  report.chunks_deleted = 4;
  report.bytes_deleted = 16384;
  report.chunks_live = 6;
  EXPECT_EQ(GcReportJson(report).dump(),
            R"({"bytes_deleted":16384,"chunks_deleted":4,"chunks_live":6,"chunks_scanned":10,)"
            R"("damaged_packs":[],"damaged_steps":[]})");
  report.damaged_packs = {"packs/pack-00000002.pack is missing"};
  report.damaged_steps = {3, 7};
  EXPECT_EQ(GcReportJson(report)["damaged_packs"].dump(), R"(["packs/pack-00000002.pack is missing"])");
  EXPECT_EQ(GcReportJson(report)["damaged_steps"].dump(), "[3,7]");
}

TEST(JsonOutputTest, OptionalNumbersAreNullWhenUndefinedOrNotFinite) {
  EXPECT_EQ(OptionalJson(std::nullopt).dump(), "null");
  EXPECT_EQ(OptionalJson(std::numeric_limits<double>::quiet_NaN()).dump(), "null");
  EXPECT_EQ(OptionalJson(std::numeric_limits<double>::infinity()).dump(), "null");
  EXPECT_EQ(OptionalJson(-std::numeric_limits<double>::infinity()).dump(), "null");
  EXPECT_EQ(OptionalJson(1.5).dump(), "1.5");
  EXPECT_EQ(OptionalJson(0.0).dump(), "0.0");
}

TEST(JsonOutputTest, PrintsIndentedWithANewlineAndReplacesInvalidUtf8) {
  cli_test::Pipe out(STDOUT_FILENO);
  nlohmann::json doc = JsonDocument("show");
  doc["name"] = std::string("a\xff" "b");  // not UTF-8: replaced by U+FFFD, not an exception
  doc["steps"] = {3, 5};
  PrintJson(doc);
  EXPECT_EQ(out.Drain(),
            "{\n"
            "  \"name\": \"a\xef\xbf\xbd" "b\",\n"
            "  \"schema\": \"trainsnap.show/1\",\n"
            "  \"steps\": [\n"
            "    3,\n"
            "    5\n"
            "  ]\n"
            "}\n");
}

}  // namespace
}  // namespace trainsnap::cli
