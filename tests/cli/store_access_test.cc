#include "cli/store_access.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "testing/status_matchers.h"
#include "testing/store_fixtures.h"
#include "testing/temp_dir.h"

namespace trainsnap::cli {
namespace {

TEST(StoreAccessTest, AMissingPathIsNotFoundInPlainWords) {
  testing::TempDir dir;
  const std::string missing = dir.Sub("none");
  const auto reading = OpenForReading(missing);
  EXPECT_EQ(reading.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(reading.status().message(), "store `" + missing + "` does not exist");
  const auto writing = OpenForWriting(missing);
  EXPECT_EQ(writing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(writing.status().message(), "store `" + missing + "` does not exist");
  EXPECT_FALSE(std::filesystem::exists(missing));  // OpenForWriting never creates a store
}

TEST(StoreAccessTest, AFileIsNotAStore) {
  testing::TempDir dir;
  const std::string file = dir.Sub("file");
  std::ofstream(file) << "x";
  const auto reading = OpenForReading(file);
  EXPECT_EQ(reading.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(reading.status().message(), "`" + file + "` is not a trainsnap store (not a directory)");
  const auto writing = OpenForWriting(file);
  EXPECT_EQ(writing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(writing.status().message(), "`" + file + "` is not a trainsnap store (not a directory)");
}

TEST(StoreAccessTest, AHeldStoreIsBusyForWritingAndReadableMeanwhile) {
  testing::TempStore held;
  ASSERT_OK(testing::WriteSnapshot(*held.store, 3, {{1, "param", DType::kInt8, {2}, {1, 2}}}));
  const std::string path = held.path().string();
  const auto writing = OpenForWriting(path);
  EXPECT_EQ(writing.status().code(), StatusCode::kBusy);
  const std::string prefix = "store `" + path +
                             "` is held by another process for writing (a training run?); stop it first: ";
  EXPECT_EQ(writing.status().message().substr(0, prefix.size()), prefix) << writing.status().ToString();
  auto reading = OpenForReading(path);
  ASSERT_OK(reading);
  auto info = (*reading)->Info(3);
  ASSERT_OK(info);
  EXPECT_EQ(info->tensors, 1u);
  held.Close();
  auto reopened = OpenForWriting(path);
  ASSERT_OK(reopened);
  EXPECT_FALSE((*reopened)->read_only());
}

TEST(StoreAccessTest, RequireStepNamesTheLatestStepOrAnEmptyStore) {
  testing::TempStore store;
  const auto empty = RequireStep(*store.store, 5);
  EXPECT_EQ(empty.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(empty.status().message(),
            "step 5 not found in store `" + store.store->path() + "` (the store is empty)");
  ASSERT_OK(testing::WriteSnapshot(*store.store, 3, {{1, "param", DType::kInt8, {2}, {1, 2}}}));
  ASSERT_OK(testing::WriteSnapshot(*store.store, 7, {{1, "param", DType::kInt8, {3}, {1, 2, 3}}}));
  const auto absent = RequireStep(*store.store, 5);
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(absent.status().message(), "step 5 not found in store `" + store.store->path() + "` (latest step: 7)");
  auto found = RequireStep(*store.store, 7);
  ASSERT_OK(found);
  EXPECT_EQ(found->step, 7);
  EXPECT_EQ(found->logical_bytes, 3u);
}

}  // namespace
}  // namespace trainsnap::cli
