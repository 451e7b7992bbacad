#include "store/pack_entry.h"

#include <gtest/gtest.h>

#include "store/chunk_codec.h"

namespace trainsnap::internal {
namespace {

TEST(PackEntryTest, RoundTripsEveryField) {
  PackEntry e;
  e.pack = 0x01020304;
  e.offset = 0x1122334455667788ull;
  e.length = 16 + 4096;
  e.raw_bytes = 4096;
  e.raw = true;
  const std::string bytes = EncodePackEntry(e);
  ASSERT_EQ(bytes.size(), kPackEntryBytes);
  EXPECT_EQ(static_cast<uint8_t>(bytes[0]), kPackEntryMagic);
  EXPECT_EQ(bytes[2], '\x01');
  // Little-endian pack number at byte 4.
  EXPECT_EQ(bytes.substr(4, 4), std::string("\x04\x03\x02\x01", 4));
  auto parsed = ParsePackEntry(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(*parsed == e);
  EXPECT_EQ(parsed->end(), e.offset + e.length);

  e.raw = false;
  e.length = 100;  // compressed: any length from a header up
  auto compressed = ParsePackEntry(EncodePackEntry(e));
  ASSERT_TRUE(compressed.ok());
  EXPECT_FALSE(compressed->raw);
  EXPECT_EQ(compressed->length, 100u);
}

TEST(PackEntryTest, RejectsDamagedEntriesWithCorruption) {
  PackEntry e;
  e.pack = 1;
  e.offset = 8;
  e.length = 16 + 10;
  e.raw_bytes = 10;
  e.raw = true;
  const std::string good = EncodePackEntry(e);
  struct Case {
    std::string value;
    std::string fragment;
  };
  std::vector<Case> cases;
  cases.push_back({good.substr(0, 27), "has 27 bytes, expected 28"});
  std::string magic = good;
  magic[0] = 'x';
  cases.push_back({magic, "bad magic"});
  std::string version = good;
  version[1] = 9;
  cases.push_back({version, "unknown version 9"});
  std::string flags = good;
  flags[2] = 3;
  cases.push_back({flags, "unknown flags"});
  PackEntry short_entry = e;
  short_entry.raw = false;
  short_entry.length = 15;
  cases.push_back({EncodePackEntry(short_entry), "length 15 is shorter than a chunk header"});
  PackEntry raw_mismatch = e;
  raw_mismatch.length = 16 + 11;
  cases.push_back({EncodePackEntry(raw_mismatch), "raw chunk of 10 bytes has length 27"});
  for (const Case& c : cases) {
    auto parsed = ParsePackEntry(c.value);
    ASSERT_FALSE(parsed.ok()) << c.fragment;
    EXPECT_EQ(parsed.status().code(), StatusCode::kCorruption);
    EXPECT_NE(parsed.status().message().find(c.fragment), std::string::npos) << parsed.status().ToString();
  }
}

}  // namespace
}  // namespace trainsnap::internal
