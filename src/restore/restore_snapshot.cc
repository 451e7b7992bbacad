#include "restore/restore_snapshot.h"

#include <deque>
#include <map>
#include <string_view>
#include <unordered_set>

#include "restore/apply.h"
#include "restore/decode.h"
#include "restore/optimizer_parts.h"
#include "restore/optimizer_restore.h"
#include "restore/partial.h"
#include "restore/validate.h"
#include "torch/contract.h"
#include "torch/exception_boundary.h"
#include "torch/manifest_codec.h"
#include "torch/rng_state.h"

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

// DecodeTensors over the stores that hold the snapshot's tensors: this one,
// and the sources of its external tensors (CheckpointerOptions::placement).
class PlacedReader final : public TensorReader {
 public:
  PlacedReader(Store& store, TensorSources* sources) : store_(store), sources_(sources) {}
  Result<DecodedTensors> Read(int64_t step, const proto::TrainingManifest& manifest,
                              const std::vector<WantedTensor>& wanted) override;

 private:
  Store& store_;
  TensorSources* const sources_;
};

Result<DecodedTensors> PlacedReader::Read(int64_t step, const proto::TrainingManifest& manifest,
                                          const std::vector<WantedTensor>& wanted) {
  if (manifest.external_tensors().empty()) return DecodeTensors(store_, step, wanted);
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
    if (sources_ == nullptr) {
      return Status::NotSupported("tensor `" + *want.name + "` role " + want.role + " is stored in source `" +
                                  *it->second + "` (a multi-process run's store): RestoreOptions::sources is not set");
    }
    elsewhere[*it->second].push_back(want);
  }
  TRAINSNAP_ASSIGN_OR_RETURN(DecodedTensors decoded, DecodeTensors(store_, step, here));
  for (const auto& [source, group] : elsewhere) {
    Result<Store*> opened = sources_->Source(source);
    if (!opened.ok()) return opened.status().WithContext("source `" + source + "`");
    if (*opened == nullptr) return Status::InvalidArgument("source `" + source + "`: resolved to no store");
    Result<DecodedTensors> part = DecodeTensors(**opened, step, group);
    if (!part.ok()) return part.status().WithContext("source `" + source + "`");
    decoded.Append(std::move(part).value());
  }
  return decoded;
}

// SnapshotInput::optimizer_parts: `manifest` with each optimizer composed
// from the parts for the target optimizer of its name (one the target lacks
// stays as it is: CheckComposition names it).
Result<const proto::TrainingManifest*> ComposeOptimizers(const proto::TrainingManifest& manifest,
                                                         const std::vector<OptimizerPart>& parts,
                                                         const std::vector<NamedOptimizer>& optimizers,
                                                         const Contract& contract, google::protobuf::Arena* arena) {
  proto::TrainingManifest* composed = google::protobuf::Arena::CreateMessage<proto::TrainingManifest>(arena);
  *composed = manifest;
  for (int i = 0; i < composed->optimizers_size(); ++i) {
    const std::string name = composed->optimizers(i).name();
    for (const NamedOptimizer& optimizer : optimizers) {
      if (optimizer.key != name) continue;
      Result<proto::OptimizerManifest> merged =
          ComposeOptimizer(name, parts, *optimizer.optimizer, contract, composed->mutable_external_tensors());
      if (!merged.ok()) return merged.status().WithContext(OptimizerName(name));
      *composed->mutable_optimizers(i) = std::move(merged).value();
    }
  }
  return composed;
}

}  // namespace

PreparedRestore::PreparedRestore(ContractCache::Lease lease, RestorePlan plan)
    : lease_(std::move(lease)), plan_(std::move(plan)) {}

PreparedRestore::~PreparedRestore() { (void)Abandon(); }

Status PreparedRestore::Apply() {
  if (done_) return Status::OK();
  done_ = true;
  return ExceptionBoundary([&] {
    WritePlan(plan_);
    return Status::OK();
  });
}

Status PreparedRestore::Abandon() {
  if (done_) return Status::OK();
  done_ = true;
  return undo_.Undo();
}

Result<std::unique_ptr<PreparedRestore>> PrepareRestore(Store& store, int64_t step, const TrainingState& target,
                                                        const RestoreOptions& options, const std::string& base_label,
                                                        BaseIdentityBuilder& base, ContractCache* contracts,
                                                        const SnapshotInput& input) {
  // 1. Manifest and format version.
  google::protobuf::Arena arena(ManifestArenaOptions());
  const proto::TrainingManifest* read = input.manifest;
  if (read == nullptr) {
    proto::TrainingManifest* own = google::protobuf::Arena::CreateMessage<proto::TrainingManifest>(&arena);
    TRAINSNAP_RETURN_IF_ERROR(ReadManifest(store, step, own));
    read = own;
  }

  // 2. Contract, frozen base, devices, the rest of the composition.
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<NamedModel> models, CollectModels(target));
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<NamedOptimizer> optimizers, CollectOptimizers(target));
  if (options.partial) {
    TRAINSNAP_ASSIGN_OR_RETURN(read, SelectTarget(*read, models, optimizers, target, &arena));
  }
  TRAINSNAP_RETURN_IF_ERROR(CheckModels(*read, models));
  Result<ContractCache::Lease> leased = ContractCache::Acquire(contracts, models);
  if (!leased.ok()) return leased.status();
  ContractCache::Lease lease = std::move(leased).value();
  const Contract& contract = *lease;
  if (input.optimizer_parts != nullptr) {
    TRAINSNAP_ASSIGN_OR_RETURN(read, ComposeOptimizers(*read, *input.optimizer_parts, optimizers, contract, &arena));
  }
  const proto::TrainingManifest& manifest = *read;
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
  PlacedReader placed(store, options.sources);
  TensorReader& reader = input.reader != nullptr ? *input.reader : placed;
  TRAINSNAP_ASSIGN_OR_RETURN(DecodedTensors decoded, reader.Read(step, manifest, wanted));

  // Prepare every write; still nothing live is touched. In `wanted` order,
  // which DecodedTensors' look-ups follow.
  RestorePlan plan;
  // Sized once: growing them moved every entry (two tensor handles each)
  // to fresh memory over and over at 50,000 parameters.
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

  // 4. The last checks, then the extras: every check that can fail runs
  // before the first live object changes, and the extras are the one change
  // that can be undone.
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable(plan));
  auto prepared = std::make_unique<PreparedRestore>(std::move(lease), std::move(plan));
  prepared->done_ = true;  // nothing to undo until the extras loaded
  TRAINSNAP_RETURN_IF_ERROR(LoadExtras(prepared->plan_, &prepared->undo_));
  prepared->done_ = false;
  return prepared;
}

}  // namespace trainsnap::internal
