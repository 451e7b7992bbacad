#include "cli/human_format.h"

#include <gtest/gtest.h>

#include "trainsnap/store.h"

namespace trainsnap::cli {
namespace {

TEST(HumanFormatTest, BytesUseIecUnits) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1024), "1.00 KiB");
  EXPECT_EQ(HumanBytes(1536), "1.50 KiB");
  EXPECT_EQ(HumanBytes(16 * 1024), "16.0 KiB");
  EXPECT_EQ(HumanBytes(uint64_t{5} << 20), "5.00 MiB");
  EXPECT_EQ(HumanBytes(uint64_t{3} << 30), "3.00 GiB");
  EXPECT_EQ(HumanBytes(uint64_t{2} << 40), "2.00 TiB");
}

TEST(HumanFormatTest, RatiosAndUndefinedRatios) {
  EXPECT_EQ(Ratio(10, 0), std::nullopt);
  EXPECT_DOUBLE_EQ(*Ratio(10, 4), 2.5);
  EXPECT_EQ(HumanRatio(Ratio(10, 4)), "2.50x");
  EXPECT_EQ(HumanRatio(std::nullopt), "-");
}

TEST(HumanFormatTest, TimesAreUtc) {
  EXPECT_EQ(HumanTime(0), "1970-01-01 00:00:00");
  EXPECT_EQ(IsoTime(1'700'000'000'123), "2023-11-14T22:13:20.123Z");
  EXPECT_EQ(IsoTime(-1), "1969-12-31T23:59:59.999Z");
  EXPECT_EQ(HumanDuration(7), "0:07");
  EXPECT_EQ(HumanDuration(754), "12:34");
  EXPECT_EQ(HumanDuration(3723), "1:02:03");
}

TEST(HumanFormatTest, IdsShapesAndDoubles) {
  EXPECT_EQ(HexId(0xabc), "0x0000000000000abc");
  EXPECT_EQ(ShapeString({}), "[]");
  EXPECT_EQ(ShapeString({4, 16}), "[4, 16]");
  EXPECT_EQ(HumanDouble(0.5), "0.5");
  EXPECT_EQ(HumanDouble(1.5e-7), "1.5e-07");
  EXPECT_EQ(HumanDouble(std::numeric_limits<double>::quiet_NaN()), "nan");
}

TEST(HumanFormatTest, StepsAndStepLists) {
  EXPECT_EQ(StepList({}), "");
  EXPECT_EQ(StepList({3}), "3");
  EXPECT_EQ(StepList({3, 5, -8}), "3, 5, -8");
  std::vector<SnapshotInfo> infos(3);
  infos[0].step = 9;
  infos[1].step = 2;
  infos[2].step = 40;
  infos[2].tensors = 7;
  EXPECT_EQ(StepsOf(infos), (std::vector<int64_t>{9, 2, 40}));
  EXPECT_EQ(StepsOf({}), std::vector<int64_t>{});
}

}  // namespace
}  // namespace trainsnap::cli
