// Identity of the frozen base a snapshot's trainable tensors belong to: the
// frozen parameters' names, shapes and dtypes, optionally an XXH3 of their
// bytes, and the caller's label.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "torch/contract.h"
#include "manifest.pb.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

// Not thread-safe. Caches the content hash: hashing a large base costs a
// full read of it, so it is recomputed only when a frozen tensor changed
// identity or version (Tensor::_version grows on every in-place write).
class BaseIdentityBuilder {
 public:
  // Describes the frozen parameters of `contract`; with `hash_content`, also
  // their bytes.
  proto::BaseIdentity Build(const Contract& contract, const std::string& label, bool hash_content);
  // XXH3-64 over the bytes of every frozen parameter, in contract order.
  uint64_t ContentHash(const Contract& contract);

 private:
  std::vector<std::pair<const c10::TensorImpl*, uint32_t>> cached_key_;
  std::optional<uint64_t> cached_hash_;
};

}  // namespace trainsnap::internal
