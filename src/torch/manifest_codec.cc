#include "torch/manifest_codec.h"

#include <utility>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "torch/manifest_format.h"

namespace trainsnap::internal {

namespace {

using Runs = google::protobuf::RepeatedPtrField<proto::ValueRun>;

void AddRun(Runs* runs, int64_t value) {
  if (!runs->empty() && runs->rbegin()->value() == value) {
    runs->rbegin()->set_count(runs->rbegin()->count() + 1);
    return;
  }
  proto::ValueRun* run = runs->Add();
  run->set_value(value);
  run->set_count(1);
}

// Expands `runs` into exactly `n` values; Corruption naming `what` otherwise
// (checked before anything is allocated beyond `n`).
Result<std::vector<int64_t>> ExpandRuns(const Runs& runs, size_t n, const std::string& what) {
  std::vector<int64_t> out;
  out.reserve(n);
  for (const proto::ValueRun& run : runs) {
    if (run.count() == 0 || run.count() > n - out.size()) {
      return Status::Corruption("manifest: " + what + " runs do not cover the layout's " + std::to_string(n) +
                                " entries");
    }
    out.insert(out.end(), run.count(), run.value());
  }
  if (out.size() != n) {
    return Status::Corruption("manifest: " + what + " runs cover " + std::to_string(out.size()) + " of the layout's " +
                              std::to_string(n) + " entries");
  }
  return out;
}

}  // namespace

Result<EncodedManifest> EncodeManifest(proto::TrainingManifest&& manifest) {
  proto::SnapshotManifest own;
  own.set_format_version(kManifestFormatVersion);
  own.set_step(manifest.step());
  proto::TrainingManifest& layout = manifest;
  layout.set_format_version(kManifestFormatVersion);
  layout.clear_step();
  for (proto::ContractParam& param : *layout.mutable_params()) {
    AddRun(own.mutable_grads(), param.grad());
    param.clear_grad();
  }
  for (proto::OptimizerManifest& optimizer : *layout.mutable_optimizers()) {
    proto::OptimizerSnapshot* out = own.add_optimizers();
    for (proto::ParamGroup& group : *optimizer.mutable_groups()) {
      out->add_group_options()->Swap(group.mutable_options());
      group.clear_options();
    }
    for (proto::ParamOptimizerState& state : *optimizer.mutable_params()) {
      AddRun(out->mutable_steps(), state.step());
      state.clear_step();
    }
  }
  if (layout.has_scheduler()) own.mutable_scheduler()->Swap(layout.mutable_scheduler());
  if (layout.has_accumulation()) own.mutable_accumulation()->Swap(layout.mutable_accumulation());
  own.mutable_rng()->Swap(layout.mutable_rng());
  layout.clear_scheduler();
  layout.clear_accumulation();
  layout.clear_rng();
  for (proto::ExtraState& extra : *layout.mutable_extra()) {
    own.add_extra_states(std::move(*extra.mutable_state()));
    extra.clear_state();
  }
  EncodedManifest out;
  // Equal layouts must serialize to equal bytes: deterministic (these
  // messages have no maps; the option pins it whatever the library default).
  {
    google::protobuf::io::StringOutputStream stream(&out.layout);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    if (!layout.SerializeToCodedStream(&coded)) return Status::InvalidArgument("manifest layout does not serialize");
  }
  if (!own.SerializeToString(&out.own)) return Status::InvalidArgument("manifest does not serialize");
  return out;
}

google::protobuf::ArenaOptions ManifestArenaOptions() {
  google::protobuf::ArenaOptions options;
  options.start_block_size = 4096;           // a few parameters (LoRA adapters) stay small
  options.max_block_size = size_t{1} << 20;  // 15 blocks for 50,000 parameters
  return options;
}

Result<proto::TrainingManifest> DecodeManifest(std::string_view own, std::string_view layout) {
  proto::TrainingManifest manifest;
  TRAINSNAP_RETURN_IF_ERROR(DecodeManifest(own, layout, &manifest));
  return manifest;
}

Status DecodeManifest(std::string_view own_bytes, std::string_view layout_bytes, proto::TrainingManifest* out) {
  proto::SnapshotManifest own;
  if (!own.ParseFromArray(own_bytes.data(), static_cast<int>(own_bytes.size()))) {
    return Status::Corruption("manifest does not parse");
  }
  if (own.format_version() != kManifestFormatVersion) {
    return Status::NotSupported("manifest format version " + std::to_string(own.format_version()) +
                                " (this build reads version " + std::to_string(kManifestFormatVersion) + ")");
  }
  if (layout_bytes.empty()) return Status::Corruption("manifest: format version 2 without a layout");
  proto::TrainingManifest& m = *out;
  if (!m.ParseFromArray(layout_bytes.data(), static_cast<int>(layout_bytes.size()))) {
    return Status::Corruption("manifest layout does not parse");
  }
  if (m.format_version() != kManifestFormatVersion) {
    return Status::Corruption("manifest layout has format version " + std::to_string(m.format_version()) +
                              ", the snapshot's part " + std::to_string(kManifestFormatVersion));
  }
  m.set_step(own.step());
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<int64_t> grads,
                             ExpandRuns(own.grads(), static_cast<size_t>(m.params_size()), "gradient state"));
  for (int i = 0; i < m.params_size(); ++i) {
    if (grads[i] < 0 || grads[i] > proto::GradState_MAX || !proto::GradState_IsValid(static_cast<int>(grads[i]))) {
      return Status::Corruption("manifest: gradient state " + std::to_string(grads[i]) + " of parameter " +
                                std::to_string(i) + " is unknown");
    }
    m.mutable_params(i)->set_grad(static_cast<proto::GradState>(grads[i]));
  }
  if (own.optimizers_size() != m.optimizers_size()) {
    return Status::Corruption("manifest: " + std::to_string(own.optimizers_size()) + " optimizers, the layout has " +
                              std::to_string(m.optimizers_size()));
  }
  for (int k = 0; k < m.optimizers_size(); ++k) {
    proto::OptimizerManifest& optimizer = *m.mutable_optimizers(k);
    const proto::OptimizerSnapshot& snap = own.optimizers(k);
    const std::string what = "optimizer `" + optimizer.name() + "`";
    if (snap.group_options_size() != optimizer.groups_size()) {
      return Status::Corruption("manifest: " + what + ": " + std::to_string(snap.group_options_size()) +
                                " group options, the layout has " + std::to_string(optimizer.groups_size()) +
                                " groups");
    }
    for (int g = 0; g < optimizer.groups_size(); ++g) {
      *optimizer.mutable_groups(g)->mutable_options() = snap.group_options(g);
    }
    TRAINSNAP_ASSIGN_OR_RETURN(std::vector<int64_t> steps,
                               ExpandRuns(snap.steps(), static_cast<size_t>(optimizer.params_size()), what + " step"));
    for (int j = 0; j < optimizer.params_size(); ++j) optimizer.mutable_params(j)->set_step(steps[j]);
  }
  if (own.has_scheduler()) *m.mutable_scheduler() = own.scheduler();
  if (own.has_accumulation()) *m.mutable_accumulation() = own.accumulation();
  *m.mutable_rng() = own.rng();
  if (own.extra_states_size() != m.extra_size()) {
    return Status::Corruption("manifest: " + std::to_string(own.extra_states_size()) +
                              " extra states, the layout has " + std::to_string(m.extra_size()));
  }
  for (int i = 0; i < m.extra_size(); ++i) m.mutable_extra(i)->set_state(own.extra_states(i));
  return Status::OK();
}

Result<proto::TrainingManifest> ReadManifest(Store& store, int64_t step) {
  proto::TrainingManifest manifest;
  TRAINSNAP_RETURN_IF_ERROR(ReadManifest(store, step, &manifest));
  return manifest;
}

Status ReadManifest(Store& store, int64_t step, proto::TrainingManifest* out) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::string own, store.Manifest(step));
  TRAINSNAP_ASSIGN_OR_RETURN(std::string layout, store.SharedManifest(step));
  return DecodeManifest(own, layout, out);
}

}  // namespace trainsnap::internal
