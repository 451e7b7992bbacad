#include "cli/safetensors_writer.h"

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

TEST(SafetensorsWriterTest, DTypeNamesAreTheFormats) {
  for (const cli_test::ExportDTypeNames& names : cli_test::kExportDTypeNames) {
    SCOPED_TRACE(DTypeName(names.dtype));
    const Result<std::string> name = SafetensorsDType(names.dtype);
    if (names.safetensors.empty()) {
      EXPECT_EQ(name.status().code(), StatusCode::kNotSupported);
    } else {
      ASSERT_OK(name);
      EXPECT_EQ(*name, names.safetensors);
    }
  }
  const auto complex = SafetensorsDType(DType::kComplex64);
  EXPECT_EQ(complex.status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(complex.status().message(), "dtype complex64 has no safetensors equivalent");
}

// Entries ordered by element size (largest first) then name; the JSON
// header with sorted keys, padded with spaces to 8-byte alignment (203
// bytes of JSON + 5 spaces = 208, the little-endian length prefix).
TEST(SafetensorsWriterTest, FileBytesAreExact) {
  testing::TempDir dir;
  const std::string path = dir.Sub("out.safetensors");
  auto writer = SafetensorsWriter::Create(path,
                                          {{"b", DType::kFloat32, {2}, 8},
                                           {"a", DType::kInt8, {3}, 3},
                                           {"c", DType::kFloat64, {}, 8}},
                                          {{"step", "7"}, {"format", "pt"}});
  ASSERT_OK(writer);
  ASSERT_EQ((*writer)->entries().size(), 3u);
  EXPECT_EQ((*writer)->entries()[0].name, "c");
  EXPECT_EQ((*writer)->entries()[1].name, "b");
  EXPECT_EQ((*writer)->entries()[2].name, "a");
  const double c = 0.5;
  const float b[2] = {1.0f, -2.0f};
  const int8_t a[3] = {1, -1, 127};
  ASSERT_OK((*writer)->Append(&c, 8));
  ASSERT_OK((*writer)->Append(b, 8));
  ASSERT_OK((*writer)->Append(a, 3));
  EXPECT_FALSE(std::filesystem::exists(path));  // under a temporary name until Finish
  ASSERT_OK((*writer)->Finish());

  const std::string header =
      R"({"__metadata__":{"format":"pt","step":"7"},)"
      R"("a":{"data_offsets":[16,19],"dtype":"I8","shape":[3]},)"
      R"("b":{"data_offsets":[8,16],"dtype":"F32","shape":[2]},)"
      R"("c":{"data_offsets":[0,8],"dtype":"F64","shape":[]}})"
      "     ";
  ASSERT_EQ(header.size(), 208u);
  std::string expected = std::string("\xd0\0\0\0\0\0\0\0", 8) + header;
  expected.append(reinterpret_cast<const char*>(&c), 8);
  expected.append(reinterpret_cast<const char*>(b), 8);
  expected.append(reinterpret_cast<const char*>(a), 3);
  EXPECT_EQ(testing::FileContents(path), expected);
}

TEST(SafetensorsWriterTest, NoMetadataAndNoTensors) {
  testing::TempDir dir;
  const std::string path = dir.Sub("empty.safetensors");
  auto writer = SafetensorsWriter::Create(path, {}, {});
  ASSERT_OK(writer);
  ASSERT_OK((*writer)->Finish());
  // "{}" padded to 8 bytes with the 8-byte prefix: 6 spaces.
  EXPECT_EQ(testing::FileContents(path), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
}

TEST(SafetensorsWriterTest, RefusesDuplicateReservedAndUnsupportedEntries) {
  testing::TempDir dir;
  const std::string path = dir.Sub("bad.safetensors");
  const auto duplicate = SafetensorsWriter::Create(path, {{"x", DType::kInt8, {1}, 1}, {"x", DType::kInt8, {1}, 1}}, {});
  EXPECT_EQ(duplicate.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(duplicate.status().message(), "safetensors: duplicate or reserved tensor name `x`");
  EXPECT_STATUS(SafetensorsWriter::Create(path, {{"__metadata__", DType::kInt8, {1}, 1}}, {}),
                StatusCode::kInvalidArgument, "safetensors: duplicate or reserved tensor name `__metadata__`");
  const auto complex = SafetensorsWriter::Create(path, {{"z", DType::kComplex128, {1}, 16}}, {});
  EXPECT_EQ(complex.status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(complex.status().message(), "tensor `z`: dtype complex128 has no safetensors equivalent");
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));  // nothing was created
}

TEST(SafetensorsWriterTest, AppendAndFinishCheckTheDeclaredEntries) {
  testing::TempDir dir;
  const std::string path = dir.Sub("out.safetensors");
  {
    auto writer = SafetensorsWriter::Create(path, {{"a", DType::kInt32, {2}, 8}, {"b", DType::kInt8, {1}, 1}}, {});
    ASSERT_OK(writer);
    ASSERT_NO_FATAL_FAILURE(cli_test::ExpectDeclaredEntriesChecked(
        **writer, 8, 4,
        {"safetensors: tensor `a` has 4 bytes, header says 8", "safetensors: 1 tensors not written",
         "safetensors: more tensors than declared"}));
  }  // destroyed unfinished: no file, no temporary file
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace trainsnap::cli
