#include "capture/staging_scope.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "store/parallel_for.h"

namespace trainsnap::internal {

namespace {

// Whether pinned host memory is available for `device`'s copies.
bool PinnedFor(const c10::Device& device) { return device.is_cuda() && torch::cuda::is_available(); }

// Whether a memcpy of `tensor`'s bytes is its copy: a contiguous CPU tensor
// without a lazy conjugate or negative bit (copy_ resolves those).
bool BytesAreValues(const torch::Tensor& tensor) {
  return tensor.device().is_cpu() && tensor.is_contiguous() && !tensor.is_conj() && !tensor.is_neg();
}

}  // namespace

StagingScope::StagingScope(std::shared_ptr<StagingPool> pool, boost::asio::thread_pool* copy_pool)
    : pool_(std::move(pool)), copy_pool_(copy_pool) {}

StagingScope::~StagingScope() {
  host_copies_.clear();  // nobody reads them
  if (readbacks_.empty()) return;
  try {
    Settle();  // a failed staging: the copies must end before their buffers are reused
  } catch (...) {
    // Nothing to report to: the capture already failed.
  }
}

torch::Tensor StagingScope::CopyToHost(const torch::Tensor& tensor) {
  const c10::Device device = tensor.device();
  const size_t bytes = tensor.nbytes();
  torch::Tensor dst = bytes > 0 && bytes < kSmallTensorBytes
                          ? slabs_.Acquire(*pool_, tensor.sizes(), tensor.scalar_type(), PinnedFor(device), owner_)
                          : pool_->Acquire(tensor.sizes(), tensor.scalar_type(), PinnedFor(device), owner_);
  if (dst.numel() == 0) return dst;
  if (BytesAreValues(tensor) && (bytes < kParallelCopyBytes || copy_pool_ == nullptr)) {
    // Many small tensors: a memcpy costs a fraction of copy_'s dispatch and
    // needs no detached handle.
    std::memcpy(dst.data_ptr(), tensor.data_ptr(), bytes);
    return dst;
  }
  // The paths below copy through LibTorch, later or at once: from a detached
  // handle, so that no copy is recorded by autograd.
  torch::Tensor src = tensor.detach();
  if (device.is_cpu()) {
    // Ranges on the copy pool are raw memcpys: only for bytes that need no
    // resolving.
    if (BytesAreValues(src) && bytes >= kParallelCopyBytes && copy_pool_ != nullptr) {
      host_copies_.push_back({src, dst});
    } else {
      dst.copy_(src);
    }
    return dst;
  }
  // Constructed before it enters the map: a backend without events or
  // streams throws here, and no null readback is left for Finish.
  auto it = readbacks_.find(device.str());
  if (it == readbacks_.end()) {
    it = readbacks_.emplace(device.str(), std::make_unique<DeviceReadback>(device)).first;
  }
  it->second->Copy(dst, src);
  device_dsts_.push_back(dst);
  return dst;
}

const uint8_t* StagingScope::CopySmallToSlab(const torch::Tensor& tensor, std::vector<torch::Tensor>* keep) {
  const size_t bytes = tensor.nbytes();
  if (bytes == 0 || bytes >= kSmallTensorBytes || !BytesAreValues(tensor)) return nullptr;
  uint8_t* dst = slabs_.CutBytes(*pool_, bytes, owner_, keep);
  if (dst != nullptr) std::memcpy(dst, tensor.data_ptr(), bytes);
  return dst;
}

void StagingScope::RunHostCopies() {
  if (host_copies_.empty()) return;
  // Ranges of about kParallelCopyBytes / 2 over every deferred copy.
  struct Range {
    uint8_t* dst;
    const uint8_t* src;
    size_t bytes;
  };
  std::vector<Range> ranges;
  constexpr size_t kRange = kParallelCopyBytes / 2;
  for (const HostCopy& copy : host_copies_) {
    auto* dst = static_cast<uint8_t*>(copy.dst.data_ptr());
    const auto* src = static_cast<const uint8_t*>(copy.src.data_ptr());
    const size_t bytes = copy.src.nbytes();
    for (size_t offset = 0; offset < bytes; offset += kRange) {
      ranges.push_back({dst + offset, src + offset, std::min(kRange, bytes - offset)});
    }
  }
  Status ignored = ParallelFor(*copy_pool_, ranges.size(), [&](size_t i) {
    std::memcpy(ranges[i].dst, ranges[i].src, ranges[i].bytes);
    return Status::OK();
  });
  (void)ignored;  // memcpy cannot fail
  host_copies_.clear();
}

void StagingScope::Settle() {
  const std::vector<torch::Tensor> in_flight = device_dsts_;  // alive until their copies end
  RunHostCopies();
  for (const std::shared_ptr<c10::Event>& event : Finish()) WaitForEvent(*event);
}

std::vector<std::shared_ptr<c10::Event>> StagingScope::Finish() {
  RunHostCopies();
  for (auto& [device, readback] : readbacks_) done_.push_back(readback->Finish());
  readbacks_.clear();
  device_dsts_.clear();  // the caller's staging area holds them until `done`
  std::vector<std::shared_ptr<c10::Event>> done = std::move(done_);
  done_.clear();
  return done;
}

}  // namespace trainsnap::internal
