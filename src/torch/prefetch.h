// Software prefetch for walks over many small tensors. At 50,000
// parameters a capture's walk over the model is bound by cache misses: each
// tensor is a chain of dependent loads (TensorImpl -> StorageImpl -> bytes;
// the gradient hangs off the autograd metadata), and the work per tensor is
// too long for the core to reach the next tensor's loads by itself. A walk
// brings in the steps of a chain for the tensors a few positions ahead of
// the one it works on, the earlier step further ahead, so that each step
// reads only lines the step before brought in.
// A prefetch never faults and never changes a result: a null or stale
// address costs a wasted load at most. Nothing here throws (no checked
// accessors: unsafe_storage, autograd_meta).
#pragma once

#include <cstddef>

#include <torch/torch.h>

namespace trainsnap::internal {

// Every cache line of `object` (reads nothing).
template <class T>
inline void PrefetchObject(const T* object) {
  const char* p = reinterpret_cast<const char*>(object);
  for (size_t offset = 0; offset < sizeof(T); offset += 64) __builtin_prefetch(p + offset);
}

enum class PrefetchStep {
  kImpl,     // the TensorImpl (reads nothing)
  kStorage,  // its StorageImpl and autograd metadata (reads the TensorImpl)
  kData,     // the first bytes of its storage (reads the StorageImpl)
};

// How many bytes kData brings in: a small tensor's, a large one's first.
inline constexpr size_t kPrefetchDataBytes = 1024;

inline void Prefetch(const c10::TensorImpl* impl, PrefetchStep step) {
  if (impl == nullptr) return;
  switch (step) {
    case PrefetchStep::kImpl:
      PrefetchObject(impl);
      return;
    case PrefetchStep::kStorage:
      __builtin_prefetch(impl->unsafe_storage().unsafeGetStorageImpl());
      __builtin_prefetch(impl->autograd_meta());
      return;
    case PrefetchStep::kData: {
      const c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
      const char* data = storage == nullptr ? nullptr : static_cast<const char*>(storage->data());
      if (data == nullptr) return;
      for (size_t offset = 0; offset < kPrefetchDataBytes; offset += 64) __builtin_prefetch(data + offset);
      return;
    }
  }
}

// The TensorImpl of `impl`'s gradient, or null when it has none (reads the
// autograd metadata: after kStorage of `impl`).
inline const c10::TensorImpl* GradImpl(const c10::TensorImpl* impl) {
  const c10::AutogradMetaInterface* meta = impl == nullptr ? nullptr : impl->autograd_meta();
  if (meta == nullptr) return nullptr;
  const c10::TensorImpl* grad = meta->grad().unsafeGetTensorImpl();
  return grad == c10::UndefinedTensorImpl::singleton() ? nullptr : grad;
}

}  // namespace trainsnap::internal
