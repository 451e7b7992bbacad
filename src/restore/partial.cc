#include "restore/partial.h"

#include <algorithm>
#include <set>
#include <string>

namespace trainsnap::internal {

namespace {

// Keeps the elements of `field` that `keep` accepts, in order.
template <class Field, class Keep>
void KeepIf(Field* field, Keep keep) {
  auto end = std::stable_partition(field->begin(), field->end(), keep);
  field->erase(end, field->end());
}

}  // namespace

Result<const proto::TrainingManifest*> SelectTarget(const proto::TrainingManifest& manifest,
                                                    const std::vector<NamedModel>& models,
                                                    const std::vector<NamedOptimizer>& optimizers,
                                                    const TrainingState& target, google::protobuf::Arena* arena) {
  if (models.empty() && optimizers.empty() && target.scheduler == nullptr && target.accumulation == nullptr &&
      target.extra.empty() && target.tensor_extra.empty() && !target.rng) {
    return Status::InvalidArgument("partial restore: the target holds nothing to restore");
  }
  std::set<std::string> given;
  for (const NamedModel& model : models) given.insert(model.key);
  auto model_given = [&given](const auto& message) { return given.count(message.model()) != 0; };
  if (manifest.base().has_content_hash()) {
    for (const proto::FrozenParam& frozen : manifest.base().frozen()) {
      if (model_given(frozen)) continue;
      return Status::NotSupported("partial restore: " +
                                  (frozen.model().empty() ? std::string("the model") : "model `" + frozen.model() + "`") +
                                  " is left out and has frozen parameter `" + frozen.name() +
                                  "`, which the snapshot's base content hash covers: give the model");
    }
  }

  proto::TrainingManifest* selected = google::protobuf::Arena::CreateMessage<proto::TrainingManifest>(arena);
  *selected = manifest;
  KeepIf(selected->mutable_models(), [&given](const std::string& key) { return given.count(key) != 0; });
  KeepIf(selected->mutable_params(), model_given);
  KeepIf(selected->mutable_model_tensors(), model_given);
  KeepIf(selected->mutable_base()->mutable_frozen(), model_given);

  std::set<std::string> optimizer_keys;
  for (const NamedOptimizer& optimizer : optimizers) optimizer_keys.insert(optimizer.key);
  KeepIf(selected->mutable_optimizers(),
         [&](const proto::OptimizerManifest& stored) { return optimizer_keys.count(stored.name()) != 0; });
  if (target.scheduler == nullptr) selected->clear_scheduler();
  if (target.accumulation == nullptr) selected->clear_accumulation();
  KeepIf(selected->mutable_extra(), [&target](const proto::ExtraState& extra) {
    return target.extra.count(extra.name()) != 0 || target.tensor_extra.count(extra.name()) != 0;
  });
  return selected;
}

}  // namespace trainsnap::internal
