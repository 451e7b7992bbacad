#include "capture/staging.h"

#include <cstring>

#include "capture/staging_scope.h"
#include "torch/dtype.h"

namespace trainsnap::internal {

torch::Tensor StagingArea::CopyToHost(const torch::Tensor& tensor) {
  if (scope_ != nullptr) return scope_->CopyToHost(tensor);
  // copy=true: a fresh buffer even when `tensor` is already a contiguous CPU
  // tensor, so that training may overwrite it while the copy is encoded.
  return tensor.detach().to(torch::kCPU, tensor.scalar_type(), /*non_blocking=*/false, /*copy=*/true,
                            c10::MemoryFormat::Contiguous);
}

Status StagingArea::CheckStageable(const torch::Tensor& tensor) {
  if (tensor.is_meta()) return Status::NotSupported("meta tensor: it has no data to capture");
  if (tensor.is_sparse() || tensor.is_sparse_csr()) {
    return Status::NotSupported("sparse tensor (layout " + c10::str(tensor.layout()) +
                                "): only dense (strided) tensors are captured; convert it with to_dense()");
  }
  if (tensor.is_mkldnn()) {
    return Status::NotSupported("mkldnn tensor: only dense (strided) tensors are captured; convert it "
                                "with to_dense()");
  }
  if (tensor.layout() != c10::kStrided) {
    return Status::NotSupported("tensor of layout " + c10::str(tensor.layout()) +
                                ": only dense (strided) tensors are captured");
  }
  return Status::OK();
}

bool StagingArea::IsAllZeroBytes(const torch::Tensor& host) {
  if (scope_ != nullptr) scope_->Settle();
  return IsAllZeroInPlace(host);
}

bool StagingArea::IsAllZeroInPlace(const torch::Tensor& tensor) {
  const auto* bytes = static_cast<const unsigned char*>(tensor.data_ptr());
  size_t size = tensor.nbytes();
  // memcmp against a static zero block, 4 KiB at a time, then the tail.
  static constexpr unsigned char kZeros[4096] = {};
  while (size >= sizeof(kZeros)) {
    if (std::memcmp(bytes, kZeros, sizeof(kZeros)) != 0) return false;
    bytes += sizeof(kZeros);
    size -= sizeof(kZeros);
  }
  return size == 0 || std::memcmp(bytes, kZeros, size) == 0;
}

Status StagingArea::Add(uint64_t param_id, std::string role, const torch::Tensor& tensor,
                        std::shared_ptr<const std::string> name) {
  TRAINSNAP_RETURN_IF_ERROR(CheckStageable(tensor));
  if (deferring_) {
    TRAINSNAP_ASSIGN_OR_RETURN(DType dtype, ToDType(tensor.scalar_type()));
    deferred_.push_back({param_id, std::move(role), dtype, tensor, std::move(name), nullptr, 0, {}});
    return Status::OK();
  }
  if (scope_ != nullptr) {
    // Most tensors of a model of many small ones: a slab piece, no tensor.
    TRAINSNAP_ASSIGN_OR_RETURN(DType dtype, ToDType(tensor.scalar_type()));
    if (const uint8_t* piece = scope_->CopySmallToSlab(tensor, &slabs_)) {
      StagedTensor& staged = tensors_.emplace_back();
      staged.param_id = param_id;
      staged.role = std::move(role);
      staged.dtype = dtype;
      staged.name = std::move(name);
      staged.piece = piece;
      staged.piece_bytes = tensor.nbytes();
      staged.piece_shape.assign(tensor.sizes().begin(), tensor.sizes().end());
      bytes_ += staged.piece_bytes;
      return Status::OK();
    }
  }
  return AddHost(param_id, std::move(role), CopyToHost(tensor), std::move(name));
}

void StagingArea::Reserve(size_t n) {
  (deferring_ ? deferred_ : tensors_).reserve(n);
}

Status StagingArea::Materialize(const std::vector<bool>& keep) {
  if (keep.size() != deferred_.size()) {
    return Status::InvalidArgument("placement of " + std::to_string(keep.size()) + " tensors, " +
                                   std::to_string(deferred_.size()) + " deferred");
  }
  std::vector<StagedTensor> deferred = std::move(deferred_);
  deferred_.clear();
  deferring_ = false;
  for (size_t i = 0; i < deferred.size(); ++i) {
    StagedTensor& staged = deferred[i];
    if (!keep[i]) continue;
    TRAINSNAP_RETURN_IF_ERROR(
        AddHost(staged.param_id, std::move(staged.role), CopyToHost(staged.host), std::move(staged.name)));
  }
  return Status::OK();
}

Status StagingArea::AddHost(uint64_t param_id, std::string role, torch::Tensor host,
                            std::shared_ptr<const std::string> name) {
  TRAINSNAP_ASSIGN_OR_RETURN(DType dtype, ToDType(host.scalar_type()));
  if (!host.is_contiguous() || host.device().type() != c10::DeviceType::CPU) {
    return Status::InvalidArgument("staged tensor role " + role + " is not a contiguous host tensor");
  }
  bytes_ += host.nbytes();
  tensors_.push_back({param_id, std::move(role), dtype, std::move(host), std::move(name), nullptr, 0, {}});
  return Status::OK();
}

TensorView ViewOf(const StagedTensor& staged) {
  TensorView view;
  view.param_id = staged.param_id;
  view.role = staged.role;
  view.dtype = staged.dtype;
  const c10::IntArrayRef sizes = staged.sizes();
  view.shape.assign(sizes.begin(), sizes.end());
  view.data = staged.data();
  view.size_bytes = staged.nbytes();
  if (staged.name && !staged.name->empty()) view.name = "tensor `" + *staged.name + "` role " + staged.role;
  return view;
}

}  // namespace trainsnap::internal
