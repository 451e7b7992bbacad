// StagingScope: how the training thread stages one asynchronous capture.
// While a scope is installed on a thread, StagingArea::CopyToHost on that
// thread takes its buffers from the scope's StagingPool (waiting when the
// bound is reached) and copies:
//  - CPU tensors: small or strided ones at once; large contiguous ones are
//    deferred and memcpy'd in ranges spread over the copy pool at Settle or
//    Finish (before the capture returns to the caller);
//  - other devices: asynchronously into pinned buffers (DeviceReadback), one
//    readback per device; the encoder waits for the returned events.
// A thread-local context keeps the staging code (stage.cc, optimizer
// adapters) unchanged: it calls CopyToHost as for a synchronous capture.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/thread_pool.hpp>
#include <torch/torch.h>

#include "capture/device_readback.h"
#include "capture/staging_pool.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

class StagingScope {
 public:
  // Installs itself on the calling thread; `copy_pool` runs the ranges of
  // large CPU copies (the calling thread must not be one of its threads).
  StagingScope(std::shared_ptr<StagingPool> pool, boost::asio::thread_pool* copy_pool);
  // Uninstalls. After a failed staging, drops pending CPU copies and waits
  // for device copies still writing into their buffers.
  ~StagingScope();
  StagingScope(const StagingScope&) = delete;
  StagingScope& operator=(const StagingScope&) = delete;

  // The scope installed on this thread, or null.
  static StagingScope* Current();

  // A contiguous host copy of `tensor` in a pooled buffer; its bytes are
  // valid after Settle() or, for the encoder, after Finish()'s events.
  torch::Tensor CopyToHost(const torch::Tensor& tensor);
  // Makes every copy issued so far readable on this thread (runs deferred CPU
  // copies; waits for device copies). Used where staging reads the bytes
  // (the zero-gradient check).
  void Settle();
  // Runs the deferred CPU copies and ends the device readbacks. Returns the
  // events the encoder must wait for before reading the host buffers.
  std::vector<std::shared_ptr<c10::Event>> Finish();

  const std::shared_ptr<StagingOwner>& owner() const { return owner_; }

  // CPU tensors at least this large are copied in ranges on the pool.
  static constexpr size_t kParallelCopyBytes = size_t{4} << 20;

 private:
  struct HostCopy {
    torch::Tensor src;  // keeps the source alive until copied
    torch::Tensor dst;
  };
  void RunHostCopies();

  std::shared_ptr<StagingPool> pool_;
  boost::asio::thread_pool* copy_pool_;
  std::shared_ptr<StagingOwner> owner_ = std::make_shared<StagingOwner>();
  StagingSlabs slabs_;  // buffers of tensors under kSmallTensorBytes
  std::vector<HostCopy> host_copies_;
  std::map<std::string, std::unique_ptr<DeviceReadback>> readbacks_;  // by device string
  std::vector<std::shared_ptr<c10::Event>> done_;
  // Destinations of device copies not yet Finish()ed: alive until then.
  std::vector<torch::Tensor> device_dsts_;
  StagingScope* previous_;
};

}  // namespace trainsnap::internal
