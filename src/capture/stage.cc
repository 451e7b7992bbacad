#include "capture/stage.h"

#include <algorithm>
#include <tuple>

#include "torch/contract.h"
#include "torch/contract_cache.h"
#include "torch/exception_boundary.h"
#include "torch/manifest_codec.h"
#include "torch/manifest_format.h"
#include "torch/prefetch.h"
#include "capture/optimizer_state.h"
#include "torch/rng_state.h"
#include "torch/scheduler_state.h"
#include "torch/dtype.h"

namespace trainsnap::internal {

StagedSnapshot::StagedSnapshot()
    : arena(std::make_unique<google::protobuf::Arena>(ManifestArenaOptions())),
      manifest(*google::protobuf::Arena::CreateMessage<proto::TrainingManifest>(arena.get())) {}

namespace {

template <class Message>
Status DescribeTensor(const torch::Tensor& tensor, Message* out) {
  for (int64_t d : tensor.sizes()) out->add_shape(d);
  TRAINSNAP_ASSIGN_OR_RETURN(DType dtype, ToDType(tensor.scalar_type()));
  out->set_dtype(static_cast<uint32_t>(dtype));
  return Status::OK();
}

// Stages `tensor`, or records it as unchanged when the tracker says so. Only
// frozen parameters are offered to the tracker (see change_tracker.h).
// The record is read now, on the training thread: the snapshot it comes from
// may be pruned (retention) before this capture is encoded. When it cannot
// be read, or does not match, the tensor is staged like any other.
Status StageOrReuse(StagedSnapshot& snapshot, const Reuse& reuse, uint64_t id, const char* role,
                    const torch::Tensor& tensor, const std::shared_ptr<const std::string>& name) {
  TRAINSNAP_RETURN_IF_ERROR(StagingArea::CheckStageable(tensor));
  if (reuse.tracker != nullptr) {
    if (std::optional<int64_t> from = reuse.tracker->Observe(snapshot.step, id, role, tensor)) {
      Result<TensorRecord> record = reuse.store->Tensor(*from, id, role);
      if (record.ok() && record->shape == std::vector<int64_t>(tensor.sizes().begin(), tensor.sizes().end()) &&
          record->bytes == tensor.nbytes()) {
        snapshot.unchanged.push_back({id, role, *from, name ? *name : std::string(), std::move(*record)});
        snapshot.unchanged_live.push_back(tensor);
        return Status::OK();
      }
    }
  }
  return snapshot.staging.Add(id, role, tensor, name);
}

Status StageTrainable(const ContractEntry& entry, bool with_grad, StagedSnapshot& snapshot, const Reuse& reuse) {
  proto::ContractParam* param = snapshot.manifest.add_params();
  param->set_id(entry.id);
  param->set_model(entry.model);
  for (const std::string& name : entry.names) param->add_names(name);
  TRAINSNAP_RETURN_IF_ERROR(DescribeTensor(entry.tensor, param));
  param->set_device(entry.tensor.device().str());
  TRAINSNAP_RETURN_IF_ERROR(StageOrReuse(snapshot, reuse, entry.id, "param", entry.tensor, entry.shared_name));

  const torch::Tensor& grad = entry.tensor.grad();
  if (!grad.defined()) {
    param->set_grad(proto::GRAD_UNDEFINED);
    return Status::OK();
  }
  TRAINSNAP_RETURN_IF_ERROR(StagingArea::CheckStageable(grad).WithContext("gradient"));
  if (grad.sizes() != entry.tensor.sizes() || grad.scalar_type() != entry.tensor.scalar_type()) {
    return Status::InvalidArgument("gradient " + ShapeString(grad.sizes()) + " " +
                                   c10::toString(grad.scalar_type()) + " does not match the parameter");
  }
  if (!with_grad) {
    param->set_grad(proto::GRAD_OMITTED);
    return Status::OK();
  }
  // A zeroed gradient (zero_grad() at a window boundary) costs nothing: it
  // is recorded, not stored, and restored as zeros. A contiguous host
  // gradient is checked in place, before any copy: a non-zero one differs
  // within its first bytes, and checking the staged copy instead would wait
  // for the copies in flight. A device gradient is checked once staged.
  const bool check_in_place = grad.device().is_cpu() && grad.is_contiguous();
  if (check_in_place && StagingArea::IsAllZeroInPlace(grad)) {
    param->set_grad(proto::GRAD_ZERO);
    return Status::OK();
  }
  torch::Tensor host = snapshot.staging.CopyToHost(grad);
  if (!check_in_place && snapshot.staging.IsAllZeroBytes(host)) {
    param->set_grad(proto::GRAD_ZERO);
    return Status::OK();
  }
  param->set_grad(proto::GRAD_STORED);
  return snapshot.staging.AddHost(entry.id, "grad", std::move(host), entry.shared_name);
}

// Brings in what StageTrainable reads of the parameters after position `i`
// (torch/prefetch.h): each position ahead one step of the chain parameter ->
// its storage and autograd metadata -> its bytes and its gradient's
// TensorImpl -> the gradient's storage -> the gradient's bytes (the zero
// check), and the names the manifest copies. A parameter's work takes about
// a microsecond: one position is time enough for a miss. At 50,000
// parameters this took a third off the walk (bench/README.md, "Session 12").
void PrefetchTrainable(const std::vector<ContractEntry>& trainable, size_t i) {
  auto impl = [&](size_t ahead) -> const c10::TensorImpl* {
    return i + ahead < trainable.size() ? trainable[i + ahead].tensor.unsafeGetTensorImpl() : nullptr;
  };
  Prefetch(impl(4), PrefetchStep::kImpl);
  Prefetch(impl(3), PrefetchStep::kStorage);
  if (i + 3 < trainable.size()) {
    PrefetchObject(trainable[i + 3].names.data());
    PrefetchObject(trainable[i + 3].shared_name.get());  // its count is beside it (make_shared)
  }
  Prefetch(impl(2), PrefetchStep::kData);
  Prefetch(GradImpl(impl(2)), PrefetchStep::kImpl);
  Prefetch(GradImpl(impl(1)), PrefetchStep::kStorage);
  if (i + 1 < trainable.size()) __builtin_prefetch(trainable[i + 1].names.front().data());  // a long name's chars
  Prefetch(GradImpl(impl(0)), PrefetchStep::kData);
}

Status StageModelTensor(const ContractEntry& entry, const char* role, StagedSnapshot& snapshot,
                        const Reuse& reuse) {
  proto::ModelTensor* out = snapshot.manifest.add_model_tensors();
  out->set_id(entry.id);
  out->set_model(entry.model);
  for (const std::string& name : entry.names) out->add_names(name);
  out->set_role(role);
  TRAINSNAP_RETURN_IF_ERROR(DescribeTensor(entry.tensor, out));
  return StageOrReuse(snapshot, reuse, entry.id, role, entry.tensor, entry.shared_name);
}

Status StageTensorExtra(const std::string& name, const TensorStateful* stateful, const TrainingState& state,
                        StagedSnapshot& snapshot) {
  if (stateful == nullptr) return Status::InvalidArgument("is null");
  if (state.extra.count(name)) return Status::InvalidArgument("is a key of both extra and tensor_extra");
  // The key ends at the first '/' of "extra:<key>/<tensor>" (ExtraTensorId):
  // ("a/b", "c") and ("a", "b/c") would be one ID.
  if (name.find('/') != std::string::npos) {
    return Status::InvalidArgument("the key contains '/', which tensor IDs reserve (\"extra:<key>/<tensor>\")");
  }
  TensorState saved;
  TRAINSNAP_RETURN_IF_ERROR(ExceptionBoundary([&] { return stateful->SaveState(&saved); }, "SaveState"));
  proto::ExtraState* extra = snapshot.manifest.add_extra();
  extra->set_name(name);
  extra->set_has_tensors(true);
  extra->set_type(std::move(saved.type));
  extra->set_state(std::move(saved.bytes));
  for (const auto& [tensor_name, tensor] : saved.tensors) {
    if (!tensor.defined()) return Status::InvalidArgument("tensor `" + tensor_name + "` is undefined");
    proto::ExtraTensor* out = extra->add_tensors();
    out->set_id(ExtraTensorId(name, tensor_name));
    out->set_name(tensor_name);
    TRAINSNAP_RETURN_IF_ERROR(DescribeTensor(tensor, out).WithContext("tensor `" + tensor_name + "`"));
    TRAINSNAP_RETURN_IF_ERROR(StagingArea::CheckStageable(tensor).WithContext("tensor `" + tensor_name + "`"));
    TRAINSNAP_RETURN_IF_ERROR(
        snapshot.staging.Add(out->id(), "extra", tensor, std::make_shared<const std::string>(name + "/" + tensor_name)));
  }
  return Status::OK();
}

// CheckpointerOptions::placement: offers every deferred model and optimizer
// tensor and every unchanged one (the same set on every process of a run,
// whichever of them its change tracker found unchanged), sorted by (name,
// role); records those placed elsewhere in the manifest, drops them, and
// copies the rest.
Status PlaceTensors(TensorPlacement& placement, StagedSnapshot& snapshot) {
  struct Offered {
    const std::string* name;
    const std::string* role;
    int64_t deferred;   // index into staging.deferred(), or -1
    int64_t unchanged;  // index into snapshot.unchanged, or -1
  };
  const std::vector<StagedTensor>& deferred = snapshot.staging.deferred();
  static const std::string kUnnamed;
  std::vector<Offered> offered;
  for (size_t i = 0; i < deferred.size(); ++i) {
    if (deferred[i].role == "extra") continue;  // tensor_extra: always stored here
    const std::string* name = deferred[i].name ? deferred[i].name.get() : &kUnnamed;
    offered.push_back({name, &deferred[i].role, static_cast<int64_t>(i), -1});
  }
  for (size_t i = 0; i < snapshot.unchanged.size(); ++i) {
    offered.push_back({&snapshot.unchanged[i].name, &snapshot.unchanged[i].role, -1, static_cast<int64_t>(i)});
  }
  std::sort(offered.begin(), offered.end(), [](const Offered& a, const Offered& b) {
    return std::tie(*a.name, *a.role) < std::tie(*b.name, *b.role);
  });
  std::vector<PlacementCandidate> candidates;
  candidates.reserve(offered.size());
  for (const Offered& o : offered) {
    const torch::Tensor& live = o.deferred >= 0 ? deferred[static_cast<size_t>(o.deferred)].host
                                                : snapshot.unchanged_live[static_cast<size_t>(o.unchanged)];
    candidates.push_back({*o.name, *o.role, static_cast<uint64_t>(live.nbytes()), live});
  }
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<std::string> sources, placement.Place(snapshot.step, candidates));
  if (sources.size() != candidates.size()) {
    return Status::InvalidArgument("the placement answered for " + std::to_string(sources.size()) + " of " +
                                   std::to_string(candidates.size()) + " tensors");
  }
  std::vector<bool> keep(deferred.size(), true);
  std::vector<bool> keep_unchanged(snapshot.unchanged.size(), true);
  for (size_t i = 0; i < offered.size(); ++i) {
    if (sources[i].empty()) continue;
    const Offered& o = offered[i];
    proto::ExternalTensor* external = snapshot.manifest.add_external_tensors();
    if (o.deferred >= 0) {
      keep[static_cast<size_t>(o.deferred)] = false;
      external->set_id(deferred[static_cast<size_t>(o.deferred)].param_id);
    } else {
      keep_unchanged[static_cast<size_t>(o.unchanged)] = false;
      external->set_id(snapshot.unchanged[static_cast<size_t>(o.unchanged)].param_id);
    }
    external->set_role(*o.role);
    external->set_source(sources[i]);
  }
  candidates.clear();  // drops the references to the live tensors
  std::vector<UnchangedTensor> unchanged;
  for (size_t i = 0; i < snapshot.unchanged.size(); ++i) {
    if (keep_unchanged[i]) unchanged.push_back(std::move(snapshot.unchanged[i]));
  }
  snapshot.unchanged = std::move(unchanged);
  snapshot.unchanged_live.clear();
  return snapshot.staging.Materialize(keep);
}

}  // namespace

bool StagesGradients(const CheckpointerOptions& options, const TrainingState& state) {
  return options.gradients == Gradients::kAlways ||
         (options.gradients == Gradients::kAuto &&
          (state.accumulation == nullptr || state.accumulation->micro_step != 0));
}

Result<std::unique_ptr<StagedSnapshot>> Stage(int64_t step, const TrainingState& state,
                                              const CheckpointerOptions& options, BaseIdentityBuilder& base,
                                              const Reuse& reuse, StagingScope* scope, ContractCache* contracts) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<NamedModel> models, CollectModels(state));
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<NamedOptimizer> optimizers, CollectOptimizers(state));
  TRAINSNAP_ASSIGN_OR_RETURN(ContractCache::Lease lease, ContractCache::Acquire(contracts, models));
  const Contract& contract = *lease;
  TRAINSNAP_RETURN_IF_ERROR(CheckNoFrozenGradients(contract));

  auto snapshot = std::make_unique<StagedSnapshot>();
  snapshot->staging = StagingArea(scope);
  snapshot->step = step;
  if (options.placement != nullptr) snapshot->staging.Defer();
  // Room for each trainable parameter, its gradient and two optimizer
  // tensors (Adam's state), and every buffer and frozen parameter, so that
  // the usual capture never moves its staged tensors while it grows.
  snapshot->staging.Reserve(4 * contract.trainable.size() + contract.buffers.size() + contract.frozen.size());
  proto::TrainingManifest& manifest = snapshot->manifest;
  manifest.set_format_version(kManifestFormatVersion);
  manifest.set_step(step);
  manifest.set_model_state(static_cast<uint32_t>(options.model_state));
  for (const NamedModel& model : models) manifest.add_models(model.key);

  const bool with_grads = StagesGradients(options, state);
  // Each context is built on failure only: it was a heap string per
  // parameter on the training thread (to scale linearly with the parameter count).
  auto named = [](Status status, const char* kind, const ContractEntry& entry) {
    return status.ok() ? status : status.WithContext(std::string(kind) + " `" + entry.names.front() + "`");
  };
  const std::vector<ContractEntry>& trainable = contract.trainable;
  for (size_t i = 0; i < trainable.size(); ++i) {
    PrefetchTrainable(trainable, i);
    const ContractEntry& entry = trainable[i];
    TRAINSNAP_RETURN_IF_ERROR(named(StageTrainable(entry, with_grads, *snapshot, Reuse{}), "parameter", entry));
  }
  if (options.model_state != ModelState::kTrainable) {
    for (const ContractEntry& entry : contract.buffers) {
      TRAINSNAP_RETURN_IF_ERROR(named(StageModelTensor(entry, "buffer", *snapshot, Reuse{}), "buffer", entry));
    }
  }
  if (options.model_state == ModelState::kFull) {
    for (const ContractEntry& entry : contract.frozen) {
      TRAINSNAP_RETURN_IF_ERROR(named(StageModelTensor(entry, "param", *snapshot, reuse), "parameter", entry));
    }
  }
  if (options.hash_base_content) {
    for (const ContractEntry& entry : contract.frozen) {
      TRAINSNAP_RETURN_IF_ERROR(StagingArea::CheckStageable(entry.tensor).WithContext(
          "frozen parameter `" + entry.names.front() + "` (hash_base_content)"));
    }
  }
  *manifest.mutable_base() = base.Build(contract, options.base_label, options.hash_base_content);

  for (const NamedOptimizer& optimizer : optimizers) {
    TRAINSNAP_RETURN_IF_ERROR(
        CaptureOptimizer(optimizer, contract, snapshot->staging, manifest.add_optimizers()));
  }
  if (state.scheduler != nullptr) {
    manifest.mutable_scheduler()->set_step_count(SchedulerStepCount(*state.scheduler));
  }
  if (state.accumulation != nullptr) {
    const AccumulationWindow& window = *state.accumulation;
    proto::AccumulationState* out = manifest.mutable_accumulation();
    out->set_micro_step(window.micro_step);
    out->set_size(window.size);
    out->set_weight_sum(window.weight_sum);
    out->set_scale(window.scale);
  }
  if (state.rng) {
    manifest.set_has_rng(true);
    TRAINSNAP_RETURN_IF_ERROR(CaptureRng(manifest.mutable_rng()));
  }
  for (const auto& [name, stateful] : state.extra) {
    if (stateful == nullptr) return Status::InvalidArgument("extra state `" + name + "` is null");
    proto::ExtraState* extra = manifest.add_extra();
    extra->set_name(name);
    TRAINSNAP_RETURN_IF_ERROR(ExceptionBoundary([&] {
                                extra->set_state(stateful->SaveState());
                                return Status::OK();
                              }, "SaveState")
                                  .WithContext("extra state `" + name + "`"));
  }
  for (const auto& [name, stateful] : state.tensor_extra) {
    TRAINSNAP_RETURN_IF_ERROR(
        StageTensorExtra(name, stateful, state, *snapshot).WithContext("extra state `" + name + "`"));
  }
  if (options.placement != nullptr) {
    TRAINSNAP_RETURN_IF_ERROR(PlaceTensors(*options.placement, *snapshot).WithContext("placement"));
  }
  snapshot->unchanged_live.clear();
  return snapshot;
}

}  // namespace trainsnap::internal
