// ContractCache: the contracts of the last two sets of models captured or
// restored, kept for the next capture or restore of the same models, so that
// a run capturing every step rebuilds its contract (names, IDs, ties, index
// tables) only when the models change. At 50,000 parameters, building it was
// a third of the time a capture held the training thread. Two, so
// that restoring into other models (an evaluation copy) does not evict the
// trained models' contract.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "torch/contract.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

class ContractCache {
 public:
  // The contract of the models given to Acquire; while it lives, the
  // contract's entries hold references to the models' tensors. Destroying it
  // drops them, so that the cache never keeps a model's memory alive between
  // captures. One at a time per cache.
  class Lease {
   public:
    Lease(Lease&& other) noexcept : cache_(other.cache_), own_(std::move(other.own_)) { other.cache_ = nullptr; }
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    ~Lease();
    const Contract& operator*() const { return own_ != nullptr ? *own_ : *cache_->entries_.front().contract; }
    const Contract* operator->() const { return &**this; }

   private:
    friend class ContractCache;
    explicit Lease(ContractCache* cache) : cache_(cache) {}
    explicit Lease(std::unique_ptr<Contract> own) : cache_(nullptr), own_(std::move(own)) {}
    ContractCache* cache_;
    std::unique_ptr<Contract> own_;  // built for this use alone (no cache)
  };

  // Acquire through `cache`, or (null) BuildContract(models) for this use
  // alone.
  static Result<Lease> Acquire(ContractCache* cache, const std::vector<NamedModel>& models);

  // BuildContract(models), or a cached contract when everything
  // BuildContract reads is as it was when that was built: the same model
  // keys; the same modules paths in Module::apply order; and for every
  // parameter and buffer, in order, the same name, TensorImpl, first data
  // byte, shape, dtype, layout and requires_grad. So the result always
  // equals what BuildContract would return now. Errors are BuildContract's
  // (nothing is cached then). May throw what LibTorch throws (callers run it
  // under an ExceptionBoundary); the cache is then rebuilt next time.
  Result<Lease> Acquire(const std::vector<NamedModel>& models);

  // Whether the last successful Acquire reused the cached contract.
  bool reused() const { return reused_; }

 private:
  // What BuildContract read of one parameter or buffer, in walk order.
  struct TensorMark {
    bool buffer = false;
    std::string key;  // its key in its module
    const c10::TensorImpl* impl = nullptr;
    const void* data = nullptr;  // its first byte; null when it has none (HasAliasableBytes)
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    c10::Layout layout = c10::kStrided;
    bool requires_grad = false;
    uint32_t sizes_at = 0, sizes_len = 0;  // its shape, in Entry::sizes
    // The entry whose representative tensor this is (first in walk order of
    // its group), refilled on reuse; else null.
    torch::Tensor* slot = nullptr;
  };
  // A visited module: its model (index into the model keys), its path, and
  // the index of its first tensor in the tensor marks.
  struct ModuleMark {
    size_t model = 0;
    std::string prefix;
    size_t first_tensor = 0;
  };
  // One cached contract and what BuildContract read to build it.
  struct Entry {
    std::unique_ptr<Contract> contract;  // stable entry addresses for the slots
    std::vector<std::string> model_keys;
    std::vector<ModuleMark> modules;
    std::vector<TensorMark> tensors;
    std::vector<int64_t> sizes;
  };
  static constexpr size_t kEntries = 2;

  // Walks `models`, comparing with `entry`'s marks and refilling its
  // contract's tensors; false at the first difference.
  static bool Matches(Entry& entry, const std::vector<NamedModel>& models);
  // Builds the contract of `models` and its marks.
  static Result<Entry> Build(const std::vector<NamedModel>& models);
  // Drops `entry`'s contract's references to tensors.
  static void Drop(Entry& entry);
  // Drops the front entry's references (Lease's destructor).
  void Release();

  std::vector<Entry> entries_;  // most recently used first; at most kEntries
  bool leased_ = false;
  bool reused_ = false;
};

}  // namespace trainsnap::internal
