#include "cli/torch_archive_writer.h"

#include <cstring>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "export_writer_conformance.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"
#include "testing/file_contents.h"

namespace trainsnap::cli {
namespace {

using namespace std::string_literals;

std::string Le16(uint16_t v) { return {static_cast<char>(v & 0xff), static_cast<char>(v >> 8)}; }
std::string Le32(uint32_t v) { return Le16(static_cast<uint16_t>(v)) + Le16(static_cast<uint16_t>(v >> 16)); }

// The pickle of {"w": float32 tensor of shape [2]} (pickletools opcodes).
const std::string kOneFloatPickle =
    "\x80\x02}("s + "X\x01\0\0\0w"s + "ctorch._utils\n_rebuild_tensor_v2\n((" + "X\x07\0\0\0storage"s +
    "ctorch\nFloatStorage\n" + "X\x01\0\0\0" "0"s + "X\x03\0\0\0cpu"s + "K\x02tQ" + "K\x00"s + "(K\x02t" +
    "(K\x01t" + "\x89" + "ccollections\nOrderedDict\n" + ")RtR" + "u.";

TEST(TorchArchiveWriterTest, StorageClassesAreTorchs) {
  for (const cli_test::ExportDTypeNames& names : cli_test::kExportDTypeNames) {
    SCOPED_TRACE(DTypeName(names.dtype));
    const Result<std::string> storage = TorchStorageClass(names.dtype);
    ASSERT_OK(storage);
    EXPECT_EQ(*storage, names.torch_storage);
  }
  const auto unknown = TorchStorageClass(DType::kUnknown);
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(unknown.status().message(), "dtype code 0 has no torch storage type");
}

TEST(TorchArchiveWriterTest, PickleBytesAreExact) {
  EXPECT_EQ(*TorchStateDictPickle({}), "\x80\x02}.");
  EXPECT_EQ(*TorchStateDictPickle({{"w", DType::kFloat32, {2}, 8}}), kOneFloatPickle);
  // A scalar (empty shape and strides) and a shape whose ints need BININT2
  // ('M') and BININT ('J'); a zero dimension counts as 1 in the strides.
  const std::string two = *TorchStateDictPickle({{"s", DType::kInt64, {}, 8}, {"z", DType::kInt16, {0, 70000}, 0}});
  const std::string expected =
      "\x80\x02}("s +                                                                   //
      "X\x01\0\0\0s"s + "ctorch._utils\n_rebuild_tensor_v2\n((" + "X\x07\0\0\0storage"s +  //
      "ctorch\nLongStorage\n" + "X\x01\0\0\0" "0"s + "X\x03\0\0\0cpu"s + "K\x01tQ" + "K\x00"s + ")" + ")" +
      "\x89" + "ccollections\nOrderedDict\n" + ")RtR" +  //
      "X\x01\0\0\0z"s + "ctorch._utils\n_rebuild_tensor_v2\n((" + "X\x07\0\0\0storage"s +
      "ctorch\nShortStorage\n" + "X\x01\0\0\0" "1"s + "X\x03\0\0\0cpu"s + "K\x00tQ"s + "K\x00"s +
      "(K\x00J\x70\x11\x01\x00t"s + "(J\x70\x11\x01\x00K\x01t"s + "\x89" + "ccollections\nOrderedDict\n" +
      ")RtR" + "u.";
  EXPECT_EQ(two, expected);
  const std::string m = *TorchStateDictPickle({{"m", DType::kUInt8, {300}, 300}});
  EXPECT_NE(m.find("M\x2c\x01tQ"s), std::string::npos);  // numel 300: BININT2
}

TEST(TorchArchiveWriterTest, PickleRefusesBadEntries) {
  EXPECT_STATUS(TorchStateDictPickle({{"a\xff", DType::kFloat32, {1}, 4}}), StatusCode::kInvalidArgument,
                "torch file: tensor name `a\xff` is not valid UTF-8");
  EXPECT_STATUS(TorchStateDictPickle({{"\xc0\x80", DType::kFloat32, {1}, 4}}), StatusCode::kInvalidArgument,
                "is not valid UTF-8");  // overlong NUL
  EXPECT_OK(TorchStateDictPickle({{"caf\xc3\xa9", DType::kFloat32, {1}, 4}}));
  EXPECT_STATUS(TorchStateDictPickle({{"w", DType::kUnknown, {1}, 4}}), StatusCode::kNotSupported,
                "dtype code 0 has no torch storage type");
  const auto wrong = TorchStateDictPickle({{"w", DType::kFloat32, {5}, 19}});
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.status().message(), "torch file: tensor `w` has 19 bytes, its shape and dtype do not give that");
  const auto negative = TorchStateDictPickle({{"w", DType::kFloat32, {-2}, 0}});
  EXPECT_EQ(negative.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(negative.status().message(), "torch file: tensor `w`: shape has a negative dimension -2");
}

// The whole file of {"w": [1.0, -2.0]}: three stored entries, each entry's
// data at a multiple of 64 (PyTorch's alignment, padded by a "FB" extra
// field), the central directory and its end record. Offsets and CRC-32s as
// Python's zlib and zipfile compute them for these bytes.
TEST(TorchArchiveWriterTest, ArchiveBytesAreExact) {
  testing::TempDir dir;
  const std::string path = dir.Sub("w.pt");
  auto writer = TorchArchiveWriter::Create(path, {{"w", DType::kFloat32, {2}, 8}});
  ASSERT_OK(writer);
  const float values[2] = {1.0f, -2.0f};
  ASSERT_OK((*writer)->Append(values, sizeof(values)));
  EXPECT_FALSE(std::filesystem::exists(path));  // written under a temporary name until Finish
  ASSERT_OK((*writer)->Finish());
  const std::string file = testing::FileContents(path);

  std::string data(8, '\0');
  std::memcpy(data.data(), values, 8);
  const uint16_t kDosDate = 33;  // 1980-01-01
  auto local = [&](const std::string& name, uint32_t crc, const std::string& body, uint16_t pad) {
    return Le32(0x04034b50) + Le16(20) + Le16(0) + Le16(0) + Le16(0) + Le16(kDosDate) + Le32(crc) +
           Le32(static_cast<uint32_t>(body.size())) + Le32(static_cast<uint32_t>(body.size())) +
           Le16(static_cast<uint16_t>(name.size())) + Le16(static_cast<uint16_t>(4 + pad)) + name + Le16(0x4246) +
           Le16(pad) + std::string(pad, '\0') + body;
  };
  auto central = [&](const std::string& name, uint32_t crc, uint32_t size, uint32_t offset) {
    return Le32(0x02014b50) + Le16(20) + Le16(20) + Le16(0) + Le16(0) + Le16(0) + Le16(kDosDate) + Le32(crc) +
           Le32(size) + Le32(size) + Le16(static_cast<uint16_t>(name.size())) + Le16(0) + Le16(0) + Le16(0) +
           Le16(0) + Le32(0) + Le32(offset) + name;
  };
  const std::string expected =
      local("archive/data.pkl", 0xad4733e0, kOneFloatPickle, 14) +  // header 0, data 64
      local("archive/data/0", 0xc3872656, data, 7) +               // header 201, data 256
      local("archive/version", 0x55679ed1, "3\n", 7) +             // header 264, data 320
      central("archive/data.pkl", 0xad4733e0, 137, 0) + central("archive/data/0", 0xc3872656, 8, 201) +
      central("archive/version", 0x55679ed1, 2, 264) +
      // End of central directory: 3 entries, 183 bytes at offset 322.
      Le32(0x06054b50) + Le16(0) + Le16(0) + Le16(3) + Le16(3) + Le32(183) + Le32(322) + Le16(0);
  ASSERT_EQ(file.size(), 527u);
  EXPECT_EQ(file, expected);
}

TEST(TorchArchiveWriterTest, Zip64RecordsFromTheThreshold) {
  testing::TempDir dir;
  const std::string path = dir.Sub("w.pt");
  TorchArchiveOptions options;
  options.zip64_from = 100;  // data.pkl (137 bytes) and every offset from 100 need zip64
  auto writer = TorchArchiveWriter::Create(path, {{"w", DType::kFloat32, {2}, 8}}, options);
  ASSERT_OK(writer);
  const float values[2] = {1.0f, -2.0f};
  ASSERT_OK((*writer)->Append(values, sizeof(values)));
  ASSERT_OK((*writer)->Finish());
  const std::string file = testing::FileContents(path);
  // data.pkl's local header: version 4.5, sizes 0xFFFFFFFF, then the zip64
  // extra field (id 1, 16 bytes: both sizes) after the 16-byte name.
  EXPECT_EQ(file.substr(4, 2), Le16(45));
  EXPECT_EQ(file.substr(18, 8), Le32(0xFFFFFFFF) + Le32(0xFFFFFFFF));
  EXPECT_EQ(file.substr(46, 4), Le16(1) + Le16(16));
  EXPECT_EQ(file.substr(50, 8), std::string("\x89\0\0\0\0\0\0\0", 8));  // 137
  // The end: zip64 end record (56 bytes), its locator (20), the classic
  // end record (22) with every field saturated.
  ASSERT_GT(file.size(), 98u);
  const std::string tail = file.substr(file.size() - 98);
  EXPECT_EQ(tail.substr(0, 4), Le32(0x06064b50));
  EXPECT_EQ(tail.substr(4, 8), std::string("\x2c\0\0\0\0\0\0\0", 8));  // 44
  EXPECT_EQ(tail.substr(24, 8), std::string("\x03\0\0\0\0\0\0\0", 8));  // 3 entries
  EXPECT_EQ(tail.substr(56, 4), Le32(0x07064b50));
  EXPECT_EQ(tail.substr(76), Le32(0x06054b50) + Le16(0) + Le16(0) + Le16(0xFFFF) + Le16(0xFFFF) +
                                 Le32(0xFFFFFFFF) + Le32(0xFFFFFFFF) + Le16(0));
}

TEST(TorchArchiveWriterTest, AppendAndFinishCheckTheDeclaredEntries) {
  testing::TempDir dir;
  const std::string path = dir.Sub("w.pt");
  {
    auto writer = TorchArchiveWriter::Create(path, {{"a", DType::kInt8, {3}, 3}, {"b", DType::kInt8, {1}, 1}});
    ASSERT_OK(writer);
    ASSERT_NO_FATAL_FAILURE(cli_test::ExpectDeclaredEntriesChecked(
        **writer, 3, 2,
        {"torch file: tensor `a` has 3 bytes, 2 were given", "torch file: 1 tensors were not appended",
         "torch file: every tensor was appended already"}));
  }  // destroyed unfinished: nothing is left behind
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  EXPECT_STATUS(TorchArchiveWriter::Create(path, {{"w", DType::kUnknown, {1}, 4}}), StatusCode::kNotSupported,
                "no torch storage type");
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace trainsnap::cli
