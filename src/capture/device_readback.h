// DeviceReadback: asynchronous device-to-host copies of one capture, ordered
// against the device's compute stream with c10's device-generic Stream/Event
// API only (compiles against a CPU-only LibTorch, runs with any backend whose
// DeviceGuardImpl supports events and stream pools, e.g. CUDA):
//
//   compute stream --record(ready)--> copy stream blocks on `ready`
//   copies are issued non_blocking on the copy stream (a side stream from
//   the backend's global pool), then copy stream --record(done)--> compute
//   stream blocks on `done`: kernels queued later on the compute stream
//   (optimizer.step, zero_grad) cannot overwrite a tensor before its copy.
//
// No call blocks the host on the device; readers of the host buffers wait for
// `done` (WaitForEvent) on a pool thread.
#pragma once

#include <memory>

#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/torch.h>

namespace trainsnap::internal {

class DeviceReadback {
 public:
  // Records `ready` on `device`'s current stream and makes a side stream wait
  // for it. Throws c10::Error when the backend has no events or streams
  // (e.g. the CPU).
  explicit DeviceReadback(c10::Device device);

  // Queues dst.copy_(src, non_blocking=true) on the copy stream. `dst` should
  // be pinned host memory for the copy to be asynchronous.
  void Copy(torch::Tensor& dst, const torch::Tensor& src);
  // Records `done` on the copy stream and makes the compute stream wait for it.
  // Returns `done`. Call once.
  std::shared_ptr<c10::Event> Finish();

  c10::Stream compute_stream() const { return compute_; }
  c10::Stream copy_stream() const { return copy_; }

 private:
  c10::Device device_;
  c10::Stream compute_;
  c10::Stream copy_;
  c10::Event ready_;
};

// Blocks until `event` has completed. c10::Event in LibTorch 1.13 has no
// synchronize(); this polls query() with short sleeps (the readback of a
// state takes at least milliseconds).
void WaitForEvent(const c10::Event& event);

}  // namespace trainsnap::internal
