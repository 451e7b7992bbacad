// What the two export format writers (SafetensorsWriter, TorchArchiveWriter)
// share, checked once for both by their tests: every DType's name in each
// format, and the declared-entries contract of Append and Finish.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "testing/status_matchers.h"
#include "trainsnap/dtype.h"
#include "trainsnap/status.h"

namespace trainsnap::cli_test {

struct ExportDTypeNames {
  DType dtype;
  std::string_view safetensors;  // "" where safetensors has none (NotSupported)
  std::string_view torch_storage;
};

// kUnknown has neither name.
inline constexpr ExportDTypeNames kExportDTypeNames[] = {
    {DType::kFloat32, "F32", "FloatStorage"},
    {DType::kFloat64, "F64", "DoubleStorage"},
    {DType::kFloat16, "F16", "HalfStorage"},
    {DType::kBFloat16, "BF16", "BFloat16Storage"},
    {DType::kInt8, "I8", "CharStorage"},
    {DType::kUInt8, "U8", "ByteStorage"},
    {DType::kInt16, "I16", "ShortStorage"},
    {DType::kInt32, "I32", "IntStorage"},
    {DType::kInt64, "I64", "LongStorage"},
    {DType::kBool, "BOOL", "BoolStorage"},
    {DType::kComplex64, "", "ComplexFloatStorage"},
    {DType::kComplex128, "", "ComplexDoubleStorage"},
};

// The messages of the declared-entries checks, exact.
struct DeclaredEntryMessages {
  std::string short_append;  // an entry appended with fewer bytes than declared
  std::string early_finish;  // Finish while one declared entry is not appended
  std::string extra_append;  // an Append past the last declared entry
};

// `writer` declares two entries, of `first_bytes` (at most 8) and 1 byte, and
// has nothing appended: an Append of `short_bytes` (< first_bytes), an early
// Finish and an extra Append are each InvalidArgument with `want`'s message
// and leave the writer usable.
template <class Writer>
void ExpectDeclaredEntriesChecked(Writer& writer, size_t first_bytes, size_t short_bytes,
                                  const DeclaredEntryMessages& want) {
  const char bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const Status short_append = writer.Append(bytes, short_bytes);
  EXPECT_EQ(short_append.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(short_append.message(), want.short_append);
  ASSERT_OK(writer.Append(bytes, first_bytes));
  const Status early = writer.Finish();
  EXPECT_EQ(early.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(early.message(), want.early_finish);
  ASSERT_OK(writer.Append(bytes, 1));
  const Status extra = writer.Append(bytes, 1);
  EXPECT_EQ(extra.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(extra.message(), want.extra_append);
}

}  // namespace trainsnap::cli_test
