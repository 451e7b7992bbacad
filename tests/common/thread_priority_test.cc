#include "common/thread_priority.h"

#include <gtest/gtest.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <boost/asio/thread_pool.hpp>

namespace trainsnap::internal {
namespace {

TEST(ThreadPriorityTest, LowersOnlyTheCallingThread) {
  const int base = ThreadNice();
  int inside = -100;
  Status status;
  std::thread t([&] {
    status = LowerThreadPriority(5);
    inside = ThreadNice();
  });
  t.join();
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(inside, std::min(19, base + 5));
  EXPECT_EQ(ThreadNice(), base);  // the caller's own thread is untouched
}

TEST(ThreadPriorityTest, CapsAt19AndZeroIsANoOp) {
  const int base = ThreadNice();
  int after_zero = -100, after_cap = -100;
  std::thread t([&] {
    ASSERT_TRUE(LowerThreadPriority(0).ok());
    after_zero = ThreadNice();
    ASSERT_TRUE(LowerThreadPriority(19).ok());
    ASSERT_TRUE(LowerThreadPriority(19).ok());  // already at the floor: still OK
    after_cap = ThreadNice();
  });
  t.join();
  EXPECT_EQ(after_zero, base);
  EXPECT_EQ(after_cap, 19);
}

TEST(ThreadPriorityTest, RejectsValuesOutside0To19) {
  EXPECT_EQ(LowerThreadPriority(-1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LowerThreadPriority(20).code(), StatusCode::kInvalidArgument);
  boost::asio::thread_pool pool(2);
  EXPECT_EQ(LowerPoolPriority(pool, 2, 20).code(), StatusCode::kInvalidArgument);
  pool.join();
}

TEST(ThreadPriorityTest, LowerPoolPriorityReachesEveryThreadOnce) {
  const int base = ThreadNice();
  boost::asio::thread_pool pool(3);
  ASSERT_TRUE(LowerPoolPriority(pool, 3, 7).ok());
  std::mutex mu;
  std::set<long> tids;
  std::vector<int> nices;
  ASSERT_TRUE(RunOnEachThread(pool, 3, [&] {
                std::lock_guard<std::mutex> lock(mu);
                tids.insert(::syscall(SYS_gettid));
                nices.push_back(ThreadNice());
                return Status::OK();
              }).ok());
  pool.join();
  EXPECT_EQ(tids.size(), 3u);
  EXPECT_EQ(nices, std::vector<int>(3, std::min(19, base + 7)));
}

TEST(ThreadPriorityTest, RunOnEachThreadReturnsTheFirstError) {
  boost::asio::thread_pool pool(2);
  Status s = RunOnEachThread(pool, 2, [] { return Status::IOError("boom"); });
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  pool.join();
}

}  // namespace
}  // namespace trainsnap::internal
