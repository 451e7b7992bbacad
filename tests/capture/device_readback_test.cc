// DeviceReadback's stream/event ordering, checked against a recording fake
// backend registered for DeviceType::PrivateUse1 (no GPU here): the copy
// stream waits for the compute stream's event, the compute stream waits for
// the copy-done event, and nothing blocks the host. The copies themselves
// (Tensor::copy_ with non_blocking on a real device) cannot run without a
// device backend; the CPU never takes this path (staging_scope: memcpy).
#include "capture/device_readback.h"

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "capture/staging_pool.h"
#include "capture/staging_scope.h"

namespace trainsnap::internal {
namespace {

constexpr c10::StreamId kComputeStream = 0;
constexpr c10::StreamId kSideStream = 7;

// What the fake backend saw, in order: "record e<N> s<stream>", "block e<N> s<stream>".
struct Log {
  std::mutex mu;
  std::vector<std::string> calls;
  int events = 0;
  std::atomic<int> queries_until_done{0};
  void Add(std::string call) {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back(std::move(call));
  }
};
Log& TheLog() {
  static Log log;
  return log;
}

struct FakeGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static c10::Device Dev() { return c10::Device(c10::DeviceType::PrivateUse1, 0); }
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device) const override { return Dev(); }
  c10::Device getDevice() const override { return Dev(); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const noexcept override {
    return c10::Stream(c10::Stream::UNSAFE, Dev(), kComputeStream);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device, bool) const override {
    return c10::Stream(c10::Stream::UNSAFE, Dev(), kSideStream);
  }
  c10::Stream exchangeStream(c10::Stream) const noexcept override { return getStream(Dev()); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex, const c10::EventFlag) const override {
    Log& log = TheLog();
    if (*event == nullptr) {
      std::lock_guard<std::mutex> lock(log.mu);
      *event = reinterpret_cast<void*>(static_cast<intptr_t>(++log.events));
    }
    log.Add("record e" + std::to_string(reinterpret_cast<intptr_t>(*event)) + " s" + std::to_string(stream.id()));
  }
  void block(void* event, const c10::Stream& stream) const override {
    TheLog().Add("block e" + std::to_string(reinterpret_cast<intptr_t>(event)) + " s" + std::to_string(stream.id()));
  }
  bool queryEvent(void*) const override { return TheLog().queries_until_done.fetch_sub(1) <= 0; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, FakeGuardImpl);

TEST(DeviceReadbackTest, CopyStreamWaitsForComputeAndComputeWaitsForCopy) {
  Log& log = TheLog();
  {
    std::lock_guard<std::mutex> lock(log.mu);
    log.calls.clear();
    log.events = 0;
  }
  DeviceReadback readback(FakeGuardImpl::Dev());
  EXPECT_EQ(readback.compute_stream().id(), kComputeStream);
  EXPECT_EQ(readback.copy_stream().id(), kSideStream);
  std::shared_ptr<c10::Event> done = readback.Finish();
  ASSERT_NE(done, nullptr);
  EXPECT_EQ(done->device_type(), c10::DeviceType::PrivateUse1);
  std::lock_guard<std::mutex> lock(log.mu);
  EXPECT_EQ(log.calls, (std::vector<std::string>{
                           "record e1 s0",  // compute stream: the tensors' values are ready
                           "block e1 s7",   // the copies (on the side stream) start after that
                           "record e2 s7",  // side stream: copies done
                           "block e2 s0",   // later compute kernels start after that
                       }));
}

TEST(DeviceReadbackTest, WaitForEventPollsUntilTheEventCompletes) {
  TheLog().queries_until_done = 3;
  DeviceReadback readback(FakeGuardImpl::Dev());
  std::shared_ptr<c10::Event> done = readback.Finish();
  WaitForEvent(*done);
  EXPECT_LT(TheLog().queries_until_done.load(), 0);  // queried until it said done
}

TEST(DeviceReadbackTest, TheCpuHasNoEventsAndNeverTakesThisPath) {
  EXPECT_THROW(DeviceReadback(c10::Device(c10::kCPU)), c10::Error);
  // A CPU tensor staged through a scope is a plain (pooled) copy with no event.
  auto pool = StagingPool::Create(0);
  StagingScope scope(pool, nullptr);
  torch::Tensor src = torch::arange(10, torch::kFloat32);
  torch::Tensor host = scope.CopyToHost(src);
  src.fill_(-1);
  EXPECT_TRUE(scope.Finish().empty());
  EXPECT_TRUE(torch::equal(host, torch::arange(10, torch::kFloat32)));
}

TEST(StagingScopeTest, LargeCpuCopiesAreDeferredUntilSettleOrFinish) {
  auto pool = StagingPool::Create(0);
  boost::asio::thread_pool copy_pool(2);
  StagingScope scope(pool, &copy_pool);
  const int64_t n = StagingScope::kParallelCopyBytes / 4 * 3 + 5;  // 3 MiB-ish ranges, odd tail
  torch::Tensor big = torch::randn({n});
  torch::Tensor want = big.clone();
  torch::Tensor host = scope.CopyToHost(big);
  torch::Tensor small = torch::randn({3, 4}).t();  // strided: copied at once
  torch::Tensor small_host = scope.CopyToHost(small);
  EXPECT_TRUE(small_host.is_contiguous());
  EXPECT_TRUE(torch::equal(small_host, small));
  scope.Settle();
  EXPECT_TRUE(torch::equal(host, want));
  torch::Tensor big2 = torch::randn({n});
  torch::Tensor host2 = scope.CopyToHost(big2);
  EXPECT_TRUE(scope.Finish().empty());
  EXPECT_TRUE(torch::equal(host2, big2));
  copy_pool.join();
}

}  // namespace
}  // namespace trainsnap::internal
