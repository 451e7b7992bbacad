#include "torch/base_identity.h"

#include <memory>

#include <xxhash.h>

#include "torch/dtype.h"

namespace trainsnap::internal {

proto::BaseIdentity BaseIdentityBuilder::Build(const Contract& contract, const std::string& label,
                                               bool hash_content) {
  proto::BaseIdentity identity;
  for (const ContractEntry& entry : contract.frozen) {
    proto::FrozenParam* frozen = identity.add_frozen();
    frozen->set_model(entry.model);
    frozen->set_name(entry.names.front());
    for (int64_t d : entry.tensor.sizes()) frozen->add_shape(d);
    Result<DType> dtype = ToDType(entry.tensor.scalar_type());
    frozen->set_dtype(static_cast<uint32_t>(dtype.ok() ? *dtype : DType::kUnknown));
  }
  if (hash_content) {
    identity.set_has_content_hash(true);
    identity.set_content_hash(ContentHash(contract));
  }
  identity.set_label(label);
  return identity;
}

uint64_t BaseIdentityBuilder::ContentHash(const Contract& contract) {
  std::vector<std::pair<const c10::TensorImpl*, uint32_t>> key;
  key.reserve(contract.frozen.size());
  for (const ContractEntry& entry : contract.frozen) {
    key.emplace_back(entry.tensor.unsafeGetTensorImpl(), entry.tensor._version());
  }
  if (cached_hash_.has_value() && key == cached_key_) return *cached_hash_;

  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(state.get());
  for (const ContractEntry& entry : contract.frozen) {
    const torch::Tensor& tensor = entry.tensor;
    // A synchronous copy: the bytes are hashed at once (a capture's pooled
    // staging copies of device tensors are still in flight here).
    torch::Tensor host = tensor.device().is_cpu() && tensor.is_contiguous()
                             ? tensor.detach()
                             : tensor.detach().to(torch::kCPU, tensor.scalar_type(), /*non_blocking=*/false,
                                                  /*copy=*/false, c10::MemoryFormat::Contiguous);
    XXH3_64bits_update(state.get(), host.data_ptr(), host.nbytes());
  }
  cached_key_ = std::move(key);
  cached_hash_ = XXH3_64bits_digest(state.get());
  return *cached_hash_;
}

}  // namespace trainsnap::internal
