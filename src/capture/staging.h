// Staging: contiguous host copies of the tensors of one capture, taken on the
// training thread so that encoding can run while training goes on.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <c10/util/SmallVector.h>
#include <torch/torch.h>

#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

class StagingScope;

struct StagedTensor {
  uint64_t param_id = 0;
  std::string role;
  DType dtype = DType::kUnknown;
  // Contiguous CPU copy, owned by the staging area; undefined for a piece
  // (below).
  torch::Tensor host;
  // Qualified parameter/buffer name, for error messages; may be null. Shared
  // (ContractEntry::shared_name), not copied per capture.
  std::shared_ptr<const std::string> name;
  // A small copy in a slab the staging area holds, without a tensor of its
  // own (StagingScope::CopySmallToSlab): its bytes and shape. Null when
  // `host` holds the copy.
  const uint8_t* piece = nullptr;
  size_t piece_bytes = 0;
  c10::SmallVector<int64_t, 5> piece_shape;

  // The copy's bytes, wherever they are.
  const void* data() const { return piece != nullptr ? piece : host.data_ptr(); }
  size_t nbytes() const { return piece != nullptr ? piece_bytes : host.nbytes(); }
  c10::IntArrayRef sizes() const { return piece != nullptr ? c10::IntArrayRef(piece_shape) : host.sizes(); }
};

// Not thread-safe; filled by one thread, then read-only.
class StagingArea {
 public:
  // `scope` null: every copy is a fresh tensor of its own (a synchronous
  // capture). Otherwise the copies go through `scope` (an asynchronous
  // capture's pooled, bounded buffers), which must outlive every call below
  // that copies or reads staged bytes (CopyToHost, Add, Materialize,
  // IsAllZeroBytes); tensors() and the views stay valid without it.
  explicit StagingArea(StagingScope* scope = nullptr) : scope_(scope) {}

  // A contiguous CPU copy of `tensor` that shares no memory with it. Through
  // a scope, its bytes are readable after the scope settles (IsAllZeroBytes
  // does that) or finishes.
  torch::Tensor CopyToHost(const torch::Tensor& tensor);
  // NotSupported unless `tensor` holds dense data a host copy can be taken
  // of: meta tensors (no data), sparse and mkldnn layouts. The message says
  // what kind of tensor it is; the caller adds which one.
  static Status CheckStageable(const torch::Tensor& tensor);
  // True when every byte of the (contiguous, host) tensor is zero. Waits
  // for the scope's copies in flight first (the tensor may be one of them).
  bool IsAllZeroBytes(const torch::Tensor& host);
  // The same for a live contiguous CPU tensor, without waiting.
  static bool IsAllZeroInPlace(const torch::Tensor& tensor);

  // Copies `tensor` and stages it as (param_id, role). NotSupported for a
  // dtype the store lacks or a tensor CheckStageable refuses. A pair staged
  // twice is not looked for here: the snapshot writer refuses it ("added
  // twice") when the capture is encoded. Stage's walks cannot produce one
  // (IDs are unique in the contract, an optimizer's roles carry its key,
  // an extra's tensors are a map); a table of every pair, probed per tensor,
  // was a cache miss each on the training thread at 50,000 parameters.
  Status Add(uint64_t param_id, std::string role, const torch::Tensor& tensor,
             std::shared_ptr<const std::string> name = nullptr);
  // Stages an existing host copy (from CopyToHost) without copying again.
  Status AddHost(uint64_t param_id, std::string role, torch::Tensor host,
                 std::shared_ptr<const std::string> name = nullptr);

  // Placement (CheckpointerOptions::placement): from Defer() on, Add checks
  // and records its tensor (`host` then holds the live tensor) without
  // copying it; Materialize(keep) copies those kept and forgets the others.
  void Defer() { deferring_ = true; }
  const std::vector<StagedTensor>& deferred() const { return deferred_; }
  // keep.size() == deferred().size(); copies in deferred() order.
  Status Materialize(const std::vector<bool>& keep);

  // Room for `n` tensors (staged or deferred) without moving any.
  void Reserve(size_t n);

  const std::vector<StagedTensor>& tensors() const { return tensors_; }
  uint64_t bytes() const { return bytes_; }

 private:
  StagingScope* scope_;  // not owned; may be null
  std::vector<StagedTensor> tensors_;
  // The slabs of the pieces in tensors_ (StagedTensor::piece).
  std::vector<torch::Tensor> slabs_;
  bool deferring_ = false;
  std::vector<StagedTensor> deferred_;
  uint64_t bytes_ = 0;
};

// A view of a staged tensor for SnapshotWriter::AddTensor; valid while the
// staging area lives.
TensorView ViewOf(const StagedTensor& staged);

}  // namespace trainsnap::internal
