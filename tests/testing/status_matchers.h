// Assertions on Status and Result: a failure prints the expression and the
// whole status (code and message).
#pragma once

#include <gtest/gtest.h>

#include "trainsnap/status.h"

namespace trainsnap::testing {

inline const Status& StatusOf(const Status& status) { return status; }
template <class T>
const Status& StatusOf(const Result<T>& result) {
  return result.status();
}

}  // namespace trainsnap::testing

// `expr` is a Status or a Result<T>.
#define ASSERT_OK(expr)                                                            \
  do {                                                                             \
    const auto& _ts_checked = (expr);                                              \
    const ::trainsnap::Status& _ts_s = ::trainsnap::testing::StatusOf(_ts_checked); \
    ASSERT_TRUE(_ts_s.ok()) << #expr << ": " << _ts_s.ToString();                  \
  } while (0)

#define EXPECT_OK(expr)                                                            \
  do {                                                                             \
    const auto& _ts_checked = (expr);                                              \
    const ::trainsnap::Status& _ts_s = ::trainsnap::testing::StatusOf(_ts_checked); \
    EXPECT_TRUE(_ts_s.ok()) << #expr << ": " << _ts_s.ToString();                  \
  } while (0)

// The status of `expr` has `expected_code` and a message containing
// `fragment`. (A parameter named `code` would be substituted into the
// `.code()` call.)
#define EXPECT_STATUS(expr, expected_code, fragment)                                              \
  do {                                                                                            \
    const auto& _ts_checked = (expr);                                                             \
    const ::trainsnap::Status& _ts_s = ::trainsnap::testing::StatusOf(_ts_checked);               \
    EXPECT_EQ(_ts_s.code(), (expected_code)) << #expr << ": " << _ts_s.ToString();                \
    EXPECT_NE(_ts_s.message().find(fragment), std::string::npos) << #expr << ": " << _ts_s.ToString(); \
  } while (0)
