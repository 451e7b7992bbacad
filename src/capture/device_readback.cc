#include "capture/device_readback.h"

#include <chrono>
#include <thread>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace trainsnap::internal {

namespace {

const c10::impl::DeviceGuardImplInterface* GuardImpl(c10::Device device) {
  return c10::impl::getDeviceGuardImpl(device.type());
}

}  // namespace

DeviceReadback::DeviceReadback(c10::Device device)
    : device_(device),
      compute_(GuardImpl(device)->getStream(device)),
      copy_(GuardImpl(device)->getStreamFromGlobalPool(device, /*isHighPriority=*/false)),
      ready_(device.type()) {
  ready_.record(compute_);
  ready_.block(copy_);
}

void DeviceReadback::Copy(torch::Tensor& dst, const torch::Tensor& src) {
  c10::StreamGuard guard(copy_);
  dst.copy_(src, /*non_blocking=*/true);
  // The source is read on the copy stream: a caching allocator must not hand
  // its memory to another stream's allocation before the copy is done.
  GuardImpl(device_)->recordDataPtrOnStream(src.storage().data_ptr(), copy_);
}

std::shared_ptr<c10::Event> DeviceReadback::Finish() {
  auto done = std::make_shared<c10::Event>(device_.type());
  done->record(copy_);
  done->block(compute_);
  return done;
}

void WaitForEvent(const c10::Event& event) {
  while (!event.query()) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

}  // namespace trainsnap::internal
