// The StoreTest gtest fixture: a temporary directory and a store at
// StorePath(), opened by OpenStore.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "testing/store_options.h"
#include "testing/temp_dir.h"
#include "trainsnap/store.h"

namespace trainsnap::testing {

// OpenStore is a fatal test failure when the store does not open: call it
// under ASSERT_NO_FATAL_FAILURE. Reopen by calling it again (the store open
// before is closed first); close by resetting store_.
class StoreTest : public ::testing::Test {
 protected:
  void OpenStore(const StoreOptions& options = TestStoreOptions()) {
    store_.reset();
    auto opened = Store::Open(StorePath(), options);
    ASSERT_TRUE(opened.ok()) << StorePath() << ": " << opened.status().ToString();
    store_ = std::move(opened).value();
  }
  std::string StorePath() const { return dir_.Sub("s"); }

  TempDir dir_;
  std::unique_ptr<Store> store_;
};

}  // namespace trainsnap::testing
