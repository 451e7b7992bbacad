#include "cli/param_names.h"

#include "cli/human_format.h"
#include "manifest.pb.h"
#include "torch/manifest_codec.h"
#include "torch/manifest_format.h"
#include "trainsnap/store.h"

namespace trainsnap::cli {

ManifestView::ManifestView() = default;
ManifestView::ManifestView(ManifestView&&) noexcept = default;
ManifestView& ManifestView::operator=(ManifestView&&) noexcept = default;
ManifestView::~ManifestView() = default;

Result<ManifestView> ManifestView::Read(Store& store, int64_t step) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::string bytes, store.Manifest(step));
  auto layout = store.SharedManifest(step);
  if (!layout.ok()) {
    ManifestView view;
    view.error_ = layout.status().ToString();
    return view;
  }
  return Parse(bytes, *layout);
}

ManifestView ManifestView::Parse(const std::string& bytes, const std::string& layout) {
  ManifestView view;
  if (bytes.empty()) return view;  // snapshots written through the Store API alone
  auto manifest = std::make_unique<proto::TrainingManifest>();
  proto::SnapshotManifest own;
  if (own.ParseFromString(bytes) && own.format_version() == internal::kManifestFormatVersion) {
    auto joined = internal::DecodeManifest(bytes, layout);
    if (!joined.ok()) {
      view.error_ = joined.status().message();
      return view;
    }
    *manifest = std::move(*joined);
  } else if (!manifest->ParseFromString(bytes)) {
    view.error_ = "manifest does not parse as trainsnap.proto.TrainingManifest";
    return view;
  }
  for (const auto& param : manifest->params()) {
    view.names_[param.id()].assign(param.names().begin(), param.names().end());
  }
  for (const auto& tensor : manifest->model_tensors()) {
    view.names_[tensor.id()].assign(tensor.names().begin(), tensor.names().end());
  }
  for (const auto& extra : manifest->extra()) {
    for (const auto& tensor : extra.tensors()) {
      view.names_[tensor.id()] = {"extra:" + extra.name() + "/" + tensor.name()};
    }
  }
  view.models_.assign(manifest->models().begin(), manifest->models().end());
  view.manifest_ = std::move(manifest);
  return view;
}

std::string ManifestView::Name(uint64_t id) const {
  auto it = names_.find(id);
  if (it == names_.end() || it->second.empty()) return HexId(id);
  return it->second.front();
}

const std::vector<std::string>& ManifestView::Names(uint64_t id) const {
  static const std::vector<std::string> kNone;
  auto it = names_.find(id);
  return it == names_.end() ? kNone : it->second;
}

}  // namespace trainsnap::cli

namespace trainsnap::cli {

std::vector<std::string> ManifestView::NamesInModel(uint64_t id, const std::string& model) const {
  std::vector<std::string> out;
  for (const std::string& name : Names(id)) {
    if (!model.empty()) {
      // Qualified names of a named model are "<model>/<module name>" (torch/contract.cc).
      const std::string prefix = model + "/";
      if (name.compare(0, prefix.size(), prefix) == 0) out.push_back(name.substr(prefix.size()));
      continue;
    }
    bool other_model = false;
    for (const std::string& key : models_) {
      other_model = other_model || (!key.empty() && name.compare(0, key.size() + 1, key + "/") == 0);
    }
    if (!other_model) out.push_back(name);
  }
  return out;
}

}  // namespace trainsnap::cli
