#include "restore/restore_snapshot.h"

#include <deque>
#include <map>
#include <string_view>
#include <unordered_set>

#include "torch/contract.h"
#include "torch/manifest_codec.h"
#include "torch/rng_state.h"
#include "restore/apply.h"
#include "restore/decode.h"
#include "restore/optimizer_restore.h"
#include "restore/validate.h"

namespace trainsnap::internal {

namespace {

// The manifest's shape, in place.
template <class Message>
c10::IntArrayRef ShapeOf(const Message& stored) {
  return c10::IntArrayRef(stored.shape().data(), static_cast<size_t>(stored.shape_size()));
}

template <class Message>
WantedTensor Want(uint64_t id, std::string role, const Message& stored) {
  static const std::string kUnnamed = "?";
  WantedTensor want;
  want.param_id = id;
  want.role = std::move(role);
  want.name = stored.names().empty() ? &kUnnamed : &stored.names(0);
  want.shape = ShapeOf(stored);
  want.dtype = static_cast<DType>(stored.dtype());
  return want;
}

const ContractEntry& EntryOf(const ContractEntry* entry) {
  // CheckContract found every ID before; reaching here is a bug.
  if (entry == nullptr) throw std::logic_error("contract entry vanished");
  return *entry;
}

// The decoded tensor of (id, role). DecodeTensors decoded every wanted
// tensor or failed; a miss is a bug.
torch::Tensor DecodedOf(DecodedTensors& decoded, uint64_t id, std::string_view role) {
  torch::Tensor* found = decoded.Find(id, role);
  if (found == nullptr) throw std::logic_error("decoded tensor vanished");
  return *found;
}

// As capture names them: "optimizer" for TrainingState::optimizer.
std::string OptimizerName(const std::string& key) { return key.empty() ? "optimizer" : "optimizer `" + key + "`"; }

Status CheckModels(const proto::TrainingManifest& manifest, const std::vector<NamedModel>& models) {
  std::vector<std::string> stored(manifest.models().begin(), manifest.models().end());
  std::vector<std::string> actual;
  for (const NamedModel& model : models) actual.push_back(model.key);
  if (stored == actual) return Status::OK();
  auto list = [](const std::vector<std::string>& keys) {
    std::string out = "[";
    for (size_t i = 0; i < keys.size(); ++i) out += (i ? ", \"" : "\"") + keys[i] + "\"";
    return out + "]";
  };
  return Status::ContractMismatch("models: expected " + list(stored) + ", actual " + list(actual));
}

// Without RestoreOptions::allow_missing_buffers, every buffer of the target
// must be in the snapshot: a snapshot made with ModelState::kTrainable would
// otherwise leave stale BatchNorm statistics behind a restore that succeeded.
Status CheckBuffersPresent(const proto::TrainingManifest& manifest, const Contract& contract) {
  std::unordered_set<uint64_t> stored;
  for (const proto::ModelTensor& tensor : manifest.model_tensors()) {
    if (tensor.role() == "buffer") stored.insert(tensor.id());
  }
  for (const ContractEntry& entry : contract.buffers) {
    if (!stored.count(entry.id)) {
      return Status::ContractMismatch("buffer `" + entry.names.front() +
                                      "`: in the target, absent from the snapshot (captured without buffers; "
                                      "RestoreOptions::allow_missing_buffers accepts that)");
    }
  }
  return Status::OK();
}

// RestoreOptions::discard_later, run by ApplyPlan as the last extra state it
// loads: after every real Stateful accepted its bytes (a failure here rolls
// them back) and before any tensor is written (nothing after it can fail).
class LaterSnapshotsDiscarder final : public Stateful {
 public:
  LaterSnapshotsDiscarder(Store& store, int64_t step) : store_(store), step_(step) {}
  std::string SaveState() const override { return std::string(); }
  Status LoadState(std::string_view) override { return store_.Rollback(step_); }

 private:
  Store& store_;
  const int64_t step_;
};

// DecodeTensors over the stores that hold the snapshot's tensors: this one,
// and the sources of its external tensors (CheckpointerOptions::placement).
Result<DecodedTensors> DecodePlaced(Store& store, int64_t step, const proto::TrainingManifest& manifest,
                                    const std::vector<WantedTensor>& wanted, TensorSources* sources) {
  if (manifest.external_tensors().empty()) return DecodeTensors(store, step, wanted);
  std::map<std::pair<uint64_t, std::string>, const std::string*> external;  // by (param_id, role)
  for (const proto::ExternalTensor& tensor : manifest.external_tensors()) {
    external.emplace(std::make_pair(tensor.id(), tensor.role()), &tensor.source());
  }
  std::vector<WantedTensor> here;
  std::map<std::string, std::vector<WantedTensor>> elsewhere;  // by source
  for (const WantedTensor& want : wanted) {
    auto it = external.find(std::make_pair(want.param_id, want.role));
    if (it == external.end()) {
      here.push_back(want);
      continue;
    }
    if (sources == nullptr) {
      return Status::NotSupported("tensor `" + *want.name + "` role " + want.role + " is stored in source `" +
                                  *it->second + "` (a multi-process run's store): RestoreOptions::sources is not set");
    }
    elsewhere[*it->second].push_back(want);
  }
  TRAINSNAP_ASSIGN_OR_RETURN(DecodedTensors decoded, DecodeTensors(store, step, here));
  for (const auto& [source, group] : elsewhere) {
    Result<Store*> opened = sources->Source(source);
    if (!opened.ok()) return opened.status().WithContext("source `" + source + "`");
    if (*opened == nullptr) return Status::InvalidArgument("source `" + source + "`: resolved to no store");
    Result<DecodedTensors> part = DecodeTensors(**opened, step, group);
    if (!part.ok()) return part.status().WithContext("source `" + source + "`");
    decoded.Append(std::move(part).value());
  }
  return decoded;
}

}  // namespace

Status RestoreSnapshot(Store& store, int64_t step, const TrainingState& target, const RestoreOptions& options,
                       const std::string& base_label, BaseIdentityBuilder& base, ContractCache* contracts) {
  // 1. Manifest and format version.
  google::protobuf::Arena arena(ManifestArenaOptions());
  proto::TrainingManifest& manifest = *google::protobuf::Arena::CreateMessage<proto::TrainingManifest>(&arena);
  TRAINSNAP_RETURN_IF_ERROR(ReadManifest(store, step, &manifest));

  // 2. Contract, frozen base, devices, the rest of the composition.
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<NamedModel> models, CollectModels(target));
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<NamedOptimizer> optimizers, CollectOptimizers(target));
  TRAINSNAP_RETURN_IF_ERROR(CheckModels(manifest, models));
  TRAINSNAP_ASSIGN_OR_RETURN(ContractCache::Lease lease, ContractCache::Acquire(contracts, models));
  const Contract& contract = *lease;
  TRAINSNAP_RETURN_IF_ERROR(CheckContract(manifest, contract));
  TRAINSNAP_RETURN_IF_ERROR(CheckDevices(contract));  // before the base's content hash reads them
  if (!options.allow_missing_buffers) TRAINSNAP_RETURN_IF_ERROR(CheckBuffersPresent(manifest, contract));
  TRAINSNAP_RETURN_IF_ERROR(CheckBaseIdentity(manifest.base(), contract, base_label, base));
  TRAINSNAP_RETURN_IF_ERROR(CheckComposition(manifest, target, optimizers, contract));
  std::optional<PreparedRng> rng;
  if (target.rng) {
    TRAINSNAP_ASSIGN_OR_RETURN(rng, PrepareRng(manifest.rng()));
  }

  // 3. Decode every tensor into staging memory, hashes verified.
  std::vector<WantedTensor> wanted;
  // Room for a parameter, its gradient and two optimizer tensors each (Adam's
  // state), so that the usual case never moves 150,000 entries.
  wanted.reserve(4 * static_cast<size_t>(manifest.params_size()) + static_cast<size_t>(manifest.model_tensors_size()));
  for (const proto::ContractParam& param : manifest.params()) {
    wanted.push_back(Want(param.id(), "param", param));
    if (options.restore_gradients && param.grad() == proto::GRAD_STORED) {
      wanted.push_back(Want(param.id(), "grad", param));
    }
  }
  for (const proto::ModelTensor& stored : manifest.model_tensors()) {
    wanted.push_back(Want(stored.id(), stored.role(), stored));
  }
  std::deque<std::string> extra_names;  // the wanted tensors' names point into it
  for (const proto::ExtraState& extra : manifest.extra()) {
    for (const proto::ExtraTensor& tensor : extra.tensors()) {
      WantedTensor want;
      want.param_id = tensor.id();
      want.role = "extra";
      want.name = &extra_names.emplace_back(extra.name() + "/" + tensor.name());
      want.shape = ShapeOf(tensor);
      want.dtype = static_cast<DType>(tensor.dtype());
      wanted.push_back(std::move(want));
    }
  }
  for (const proto::OptimizerManifest& stored : manifest.optimizers()) {
    TRAINSNAP_RETURN_IF_ERROR(WantOptimizerTensors(stored, contract, &wanted)
                                  .WithContext(OptimizerName(stored.name())));
  }
  TRAINSNAP_ASSIGN_OR_RETURN(DecodedTensors decoded, DecodePlaced(store, step, manifest, wanted, options.sources));

  // Prepare every write; still nothing live is touched. In `wanted` order,
  // which DecodedTensors' look-ups follow.
  RestorePlan plan;
  // Sized once: growing them moved every entry (two tensor handles each)
  // to fresh memory over and over at 50,000 parameters (issue 18).
  plan.copies.reserve(static_cast<size_t>(manifest.params_size()) +
                      static_cast<size_t>(manifest.model_tensors_size()));
  if (options.restore_gradients) plan.grads.reserve(static_cast<size_t>(manifest.params_size()));
  for (int i = 0; i < manifest.params_size(); ++i) {
    const proto::ContractParam& param = manifest.params(i);
    const ContractEntry& entry = EntryOf(contract.Trainable(param.id(), static_cast<size_t>(i)));
    plan.copies.push_back({entry.tensor, DecodedOf(decoded, param.id(), "param"), "parameter",
                           &entry.names.front()});
    if (!options.restore_gradients) continue;
    RestorePlan::Grad grad;
    grad.param = entry.tensor;
    grad.state = param.grad();
    if (grad.state == proto::GRAD_STORED) {
      grad.staged = DecodedOf(decoded, param.id(), "grad").to(entry.tensor.device());
    }
    plan.grads.push_back(std::move(grad));
  }
  for (const proto::ModelTensor& stored : manifest.model_tensors()) {
    const bool buffer = stored.role() == "buffer";
    const ContractEntry& entry = EntryOf(buffer ? contract.Buffer(stored.id()) : contract.Frozen(stored.id()));
    plan.copies.push_back({entry.tensor, DecodedOf(decoded, stored.id(), stored.role()),
                           buffer ? "buffer" : "parameter", &entry.names.front()});
  }
  for (const proto::ExtraState& extra : manifest.extra()) {
    RestorePlan::Extra item;
    item.name = extra.name();
    if (!extra.has_tensors()) {
      item.target = target.extra.at(extra.name());
      item.bytes = extra.state();
    } else {
      item.tensor_target = target.tensor_extra.at(extra.name());
      item.tensor_state.type = extra.type();
      item.tensor_state.bytes = extra.state();
      for (const proto::ExtraTensor& tensor : extra.tensors()) {
        item.tensor_state.tensors[tensor.name()] = DecodedOf(decoded, tensor.id(), "extra");
      }
    }
    plan.extra.push_back(std::move(item));
  }
  for (const proto::OptimizerManifest& stored : manifest.optimizers()) {
    torch::optim::Optimizer* optimizer = nullptr;
    for (const NamedOptimizer& named : optimizers) {
      if (named.key == stored.name()) optimizer = named.optimizer;
    }
    Result<PreparedOptimizer> prepared =
        PrepareOptimizer(stored, *optimizer, contract, decoded, options.restore_optimizer_options);
    if (!prepared.ok()) return prepared.status().WithContext(OptimizerName(stored.name()));
    plan.optimizers.push_back(std::move(prepared).value());
  }
  if (target.scheduler != nullptr) {
    plan.scheduler = target.scheduler;
    plan.scheduler_step_count = manifest.scheduler().step_count();
  }
  if (target.accumulation != nullptr) {
    const proto::AccumulationState& window = manifest.accumulation();
    plan.accumulation = target.accumulation;
    plan.window = AccumulationWindow{window.micro_step(), window.size(), window.weight_sum(), window.scale()};
  }
  plan.rng = std::move(rng);
  LaterSnapshotsDiscarder discarder(store, step);
  if (options.discard_later) {
    RestorePlan::Extra item;
    item.name = "(discard_later)";
    item.target = &discarder;
    plan.extra.push_back(std::move(item));
  }

  // 4. Copy in: ApplyPlan checks that every live tensor accepts the write
  // before the first one.
  return ApplyPlan(plan);
}

}  // namespace trainsnap::internal
