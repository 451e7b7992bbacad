// StagingScope: how the training thread stages one asynchronous capture.
// A StagingArea given the scope (Stage's `scope`) copies through it: the
// buffers come from the scope's StagingPool (waiting when the bound is
// reached), and
//  - CPU tensors: small or strided ones are copied at once; large contiguous
//    ones are deferred and memcpy'd in ranges spread over the copy pool at
//    Settle or Finish (before the capture returns to the caller);
//  - other devices: asynchronously into pinned buffers (DeviceReadback), one
//    readback per device; the encoder waits for the returned events.
// One thread uses a scope (it is not thread-safe), and it outlives the
// staging areas' copying calls.
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
  // `copy_pool` runs the ranges of large CPU copies (the scope's thread must
  // not be one of its threads); null copies them on the scope's thread.
  StagingScope(std::shared_ptr<StagingPool> pool, boost::asio::thread_pool* copy_pool);
  // After a failed staging (no Finish), drops pending CPU copies and waits
  // for device copies still writing into their buffers.
  ~StagingScope();
  StagingScope(const StagingScope&) = delete;
  StagingScope& operator=(const StagingScope&) = delete;

  // A contiguous host copy of `tensor` in a pooled buffer; its bytes are
  // valid after Settle() or, for the encoder, after Finish()'s events.
  torch::Tensor CopyToHost(const torch::Tensor& tensor);
  // A small contiguous CPU tensor (under kSmallTensorBytes, not a lazy
  // conjugate or negative view) copied at once into a slab, as a bare
  // pointer to its bytes: no tensor is made for the copy. `keep` receives
  // the slabs (SlabChain::CutBytes). Null, with nothing copied, for any
  // other tensor, and for the first small ones of a capture
  // (StagingSlabs::kUnslabbed): CopyToHost serves those.
  const uint8_t* CopySmallToSlab(const torch::Tensor& tensor, std::vector<torch::Tensor>* keep);
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
};

}  // namespace trainsnap::internal
