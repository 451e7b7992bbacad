#include "store/schema.h"

#include <gtest/gtest.h>

#include <rocksdb/utilities/table_properties_collectors.h>

#include "store/column_families.h"

namespace trainsnap::testing {
namespace {

using internal::ColumnFamily;

// Retention leaves the chunk index's tombstones to RocksDB's background
// compactions (RocksStore::IndexTidy::kInBackground): the chunk index, and
// only it, marks SST files heavy with deletions for compaction.
TEST(SchemaTest, OnlyTheChunkIndexIsCompactedOnItsDeletions) {
  const std::vector<rocksdb::ColumnFamilyDescriptor> families = internal::ColumnFamilies();
  ASSERT_EQ(families.size(), internal::kColumnFamilyCount);
  for (size_t i = 0; i < families.size(); ++i) {
    const auto& collectors = families[i].options.table_properties_collector_factories;
    if (static_cast<ColumnFamily>(i) != ColumnFamily::kChunks) {
      EXPECT_TRUE(collectors.empty()) << families[i].name;
      continue;
    }
    ASSERT_EQ(families[i].name, internal::ColumnFamilyName(ColumnFamily::kChunks));
    ASSERT_EQ(collectors.size(), 1u);
    // By name: Debian's librocksdb may lack RTTI for dynamic_cast.
    ASSERT_STREQ(collectors[0]->Name(), rocksdb::CompactOnDeletionCollectorFactory::kClassName());
    const auto* on_deletion = static_cast<const rocksdb::CompactOnDeletionCollectorFactory*>(collectors[0].get());
    EXPECT_EQ(on_deletion->GetWindowSize(), internal::kIndexDeletionWindow);
    EXPECT_EQ(on_deletion->GetDeletionTrigger(), internal::kIndexDeletionTrigger);
    EXPECT_EQ(on_deletion->GetDeletionRatio(), internal::kIndexDeletionRatio);
  }
}

}  // namespace
}  // namespace trainsnap::testing
