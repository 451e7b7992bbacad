// Names for parameter IDs: the manifest's contract when it parses (first
// qualified name, tied names as aliases), the ID in hex otherwise.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainsnap/status.h"

namespace trainsnap {
class Store;
}  // namespace trainsnap

namespace trainsnap::proto {
class TrainingManifest;
}  // namespace trainsnap::proto

namespace trainsnap::cli {

class ManifestView {
 public:
  // Never fails: an empty or unparsable manifest gives a view without names
  // (error() says why; empty for an empty manifest). A manifest of format
  // version 2 (the checkpointer's, src/torch/manifest_codec.h) is joined with
  // `layout`, the snapshot's shared manifest, which holds the names; any
  // other manifest is parsed as one whole TrainingManifest (version 1, as
  // Store-API writers may still store).
  static ManifestView Parse(const std::string& bytes, const std::string& layout = {});
  // Store::Manifest and Store::SharedManifest of `step`, parsed. Fails only
  // when Store::Manifest does; a shared manifest that does not read (a
  // missing or damaged chunk) gives a view without names whose error() says why.
  static Result<ManifestView> Read(Store& store, int64_t step);
  ManifestView(ManifestView&&) noexcept;
  ManifestView& operator=(ManifestView&&) noexcept;
  ~ManifestView();

  // The parsed manifest, or nullptr.
  const proto::TrainingManifest* manifest() const { return manifest_.get(); }
  const std::string& error() const { return error_; }
  // First qualified name of the parameter/tensor, or HexId(id).
  std::string Name(uint64_t id) const;
  // Every qualified name (tied parameters have several); empty if unknown.
  const std::vector<std::string>& Names(uint64_t id) const;
  bool Knows(uint64_t id) const { return names_.count(id) > 0; }
  // The model keys the snapshot captured (TrainingManifest::models; "" is
  // TrainingState::model). Empty without a manifest.
  const std::vector<std::string>& models() const { return models_; }
  // The names of `id` inside model `model`, as that module names them: a
  // named model's "<model>/" prefix removed. Every such name (tied
  // parameters have several); empty when `id` is not in that model.
  std::vector<std::string> NamesInModel(uint64_t id, const std::string& model) const;

 private:
  ManifestView();
  std::unique_ptr<proto::TrainingManifest> manifest_;
  std::string error_;
  std::map<uint64_t, std::vector<std::string>> names_;
  std::vector<std::string> models_;
};

}  // namespace trainsnap::cli
