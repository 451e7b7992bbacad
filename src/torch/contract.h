// The trainable-parameter contract: which tensors of the caller's models a
// snapshot is about, under IDs that are stable across processes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

#include "trainsnap/checkpointer.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

// A model and the key that qualifies its names ("" for TrainingState::model).
struct NamedModel {
  std::string key;
  torch::nn::Module* module = nullptr;
};

struct NamedOptimizer {
  std::string key;
  torch::optim::Optimizer* optimizer = nullptr;
};

// TrainingState::model (key "") followed by TrainingState::models in key
// order. InvalidArgument for an empty key or a null module in the map.
Result<std::vector<NamedModel>> CollectModels(const TrainingState& state);
// Same for the optimizers.
Result<std::vector<NamedOptimizer>> CollectOptimizers(const TrainingState& state);

// "name" for the unnamed model, "key/name" for a named one.
std::string QualifiedName(std::string_view model_key, std::string_view name);
// XXH3-64 of a qualified name: the stable parameter ID.
uint64_t ParamId(std::string_view qualified_name);
// ID of tensor `tensor` of TrainingState::tensor_extra[`extra`]: ParamId of
// "extra:<extra>/<tensor>". Its records use role "extra", which no model or
// optimizer tensor uses, so an equal ID cannot collide with theirs. Tensor
// names may contain '/', keys may not (capture refuses them): otherwise
// ("a/b", "c") and ("a", "b/c") would share an ID.
uint64_t ExtraTensorId(std::string_view extra, std::string_view tensor);

// One tensor of the models, with every qualified name it goes by.
struct ContractEntry {
  uint64_t id = 0;                 // ParamId(names[0])
  std::string model;               // key of the model names[0] belongs to
  std::vector<std::string> names;  // qualified names, in named_parameters() order
  // names[0], shared with the tensors a capture stages: a copy per staged
  // tensor was a heap string each on the training thread.
  std::shared_ptr<const std::string> shared_name;
  torch::Tensor tensor;
  // Every TensorImpl the names go by (more than one when tied by storage).
  std::vector<const c10::TensorImpl*> impls;
};

struct Contract {
  std::vector<ContractEntry> trainable;  // requires_grad parameters
  std::vector<ContractEntry> frozen;     // the other parameters
  std::vector<ContractEntry> buffers;    // defined buffers
  // Trainable and frozen parameters by TensorImpl (optimizer look-ups).
  std::unordered_map<const c10::TensorImpl*, uint64_t> param_ids;
  // Index into `trainable`, `frozen` and `buffers` by ID.
  std::unordered_map<uint64_t, size_t> trainable_index;
  std::unordered_map<uint64_t, size_t> frozen_index;
  std::unordered_map<uint64_t, size_t> buffer_index;

  // The entry of ID `id` in trainable/frozen/buffers (constant time), or null.
  const ContractEntry* Trainable(uint64_t id) const;
  const ContractEntry* Frozen(uint64_t id) const;
  const ContractEntry* Buffer(uint64_t id) const;
  // A trainable or frozen parameter.
  const ContractEntry* Param(uint64_t id) const;

  // The same, looking first at trainable position `hint` (no hash-table
  // probe, a cache miss each at 50,000 parameters, when it holds the
  // parameter): manifests and optimizers list parameters in model order,
  // so a caller walking them passes the position after its last find
  // (TrainablePosition + 1).
  const ContractEntry* Trainable(uint64_t id, size_t hint) const;
  const ContractEntry* Param(uint64_t id, size_t hint) const;
  // By TensorImpl (any of a tied entry's), as param_ids finds it.
  const ContractEntry* Param(const c10::TensorImpl* impl, size_t hint) const;
  // `entry`'s position in `trainable`, or trainable.size() when it is no
  // trainable entry.
  size_t TrainablePosition(const ContractEntry* entry) const;
};

// Whether `tensor` has bytes another tensor can alias (ties are found by
// their first byte): not meta and empty tensors, whose data pointers are null.
bool HasAliasableBytes(const torch::Tensor& tensor);

// Builds the contract of `models`. Tensors sharing a TensorImpl, or starting
// at the same storage byte with the same shape and dtype, are one entry
// (tied); tied names whose requires_grad disagree are InvalidArgument, as are
// two names hashing to one ID. A view starting at the same byte with another
// shape or dtype is an entry of its own (as a view at another offset is).
Result<Contract> BuildContract(const std::vector<NamedModel>& models);

// InvalidArgument naming the first frozen parameter that holds a gradient.
Status CheckNoFrozenGradients(const Contract& contract);

// "[4, 8]"
std::string ShapeString(c10::IntArrayRef shape);

}  // namespace trainsnap::internal
