#include "capture/stage_estimate.h"

#include <vector>

#include "capture/stage.h"
#include "torch/contract.h"
#include "torch/optimizer_traits.h"

namespace trainsnap::internal {

namespace {

uint64_t Bytes(const torch::Tensor& tensor) { return tensor.defined() ? tensor.nbytes() : 0; }

uint64_t EntryBytes(const std::vector<ContractEntry>& entries) {
  uint64_t bytes = 0;
  for (const ContractEntry& entry : entries) bytes += Bytes(entry.tensor);
  return bytes;
}

// Every state tensor of `optimizer` (all of its parameters' states).
Result<uint64_t> OptimizerBytes(torch::optim::Optimizer& optimizer) {
  uint64_t bytes = 0;
  TRAINSNAP_RETURN_IF_ERROR(VisitOptimizer(optimizer, [&](auto traits) -> Status {
    using Traits = decltype(traits);
    for (const auto& [key, state] : optimizer.state()) {
      const auto* typed = dynamic_cast<const typename Traits::State*>(state.get());
      if (typed == nullptr) continue;  // Stage refuses it; an estimate need not
      Traits::ForEachTensor(*typed, [&bytes](const char*, const torch::Tensor& tensor) { bytes += Bytes(tensor); });
    }
    return Status::OK();
  }));
  return bytes;
}

}  // namespace

Result<uint64_t> EstimateStagedBytes(const TrainingState& state, const CheckpointerOptions& options,
                                     ContractCache* contracts) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<NamedModel> models, CollectModels(state));
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<NamedOptimizer> optimizers, CollectOptimizers(state));
  TRAINSNAP_ASSIGN_OR_RETURN(ContractCache::Lease lease, ContractCache::Acquire(contracts, models));
  const Contract& contract = *lease;
  uint64_t bytes = EntryBytes(contract.trainable);
  if (StagesGradients(options, state)) {
    for (const ContractEntry& entry : contract.trainable) bytes += Bytes(entry.tensor.grad());
  }
  if (options.model_state != ModelState::kTrainable) bytes += EntryBytes(contract.buffers);
  if (options.model_state == ModelState::kFull) bytes += EntryBytes(contract.frozen);
  for (const NamedOptimizer& optimizer : optimizers) {
    TRAINSNAP_ASSIGN_OR_RETURN(uint64_t optimizer_bytes, OptimizerBytes(*optimizer.optimizer));
    bytes += optimizer_bytes;
  }
  return bytes;
}

}  // namespace trainsnap::internal
