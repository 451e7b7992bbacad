// trainsnap export STORE STEP --format safetensors|torch --out FILE [--role R]... [--model M]
#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/human_format.h"
#include "cli/json_output.h"
#include "cli/output_file.h"
#include "cli/param_names.h"
#include "cli/progress_bar.h"
#include "cli/safetensors_writer.h"
#include "cli/store_access.h"
#include "cli/tensor_decode.h"
#include "cli/torch_archive_writer.h"

namespace trainsnap::cli {

namespace {

struct ExportOptions {
  std::string store;
  int64_t step = 0;
  std::string format;
  std::string out;
  std::vector<std::string> roles;     // empty = every role (with --model: param and buffer)
  std::optional<std::string> model;   // --model: one model's state dict, by its own names
  bool json = false;
};

// Roles stored under the module's own tensor name: parameters and buffers,
// the entries of a state dict.
bool StateDictRole(const std::string& role) { return role == "param" || role == "buffer"; }

// The names of a tensor in the exported file. Without --model: the
// parameter's first qualified name (a named model's key included,
// "G/conv1.weight"). With --model M: every name the tensor has inside M
// (tied parameters appear under each, as in a state dict), without the "M/"
// prefix; none when the tensor is not M's. Parameters and buffers go by the
// name alone (so the file loads by name); every other role is
// "<name>:<role>" (e.g. "fc.weight:exp_avg").
std::vector<std::string> ExportNames(const ManifestView& view, const TensorRecord& record,
                                     const std::optional<std::string>& model) {
  std::vector<std::string> names;
  if (model.has_value()) {
    names = view.NamesInModel(record.param_id, *model);
  } else {
    names.push_back(view.Name(record.param_id));
  }
  if (!StateDictRole(record.role)) {
    for (std::string& name : names) name += ":" + record.role;
  }
  return names;
}

std::string JoinNames(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + ("`" + item + "`");
  return out;
}

Status RunExport(const ExportOptions& options) {
  // A target that may not be replaced is refused before the store is read.
  TRAINSNAP_RETURN_IF_ERROR(CheckOutputPath(options.out));
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenForReading(options.store));
  TRAINSNAP_RETURN_IF_ERROR(RequireStep(*store, options.step).status());
  const std::string context = "step " + std::to_string(options.step);
  auto read = ManifestView::Read(*store, options.step);
  if (!read.ok()) return read.status().WithContext(context + ": manifest");
  ManifestView view = std::move(*read);
  if (options.model.has_value()) {
    if (view.manifest() == nullptr) {
      return Status::NotFound(context + ": --model needs the checkpointer's manifest, and this snapshot " +
                                     (view.error().empty() ? "has none" : "has a damaged one: " + view.error()));
    }
    const auto& models = view.models();
    if (std::find(models.begin(), models.end(), *options.model) == models.end()) {
      return Status::NotFound(context + ": no model `" + *options.model + "` (models: " + JoinNames(models) + ")");
    }
  }
  auto all = store->Tensors(options.step);
  if (!all.ok()) return all.status().WithContext(context + ": tensor records");

  std::set<std::string> wanted(options.roles.begin(), options.roles.end());
  if (wanted.empty() && options.model.has_value()) wanted = {"param", "buffer"};
  std::set<std::string> present;
  std::vector<TensorRecord> records;
  for (TensorRecord& r : *all) {
    present.insert(r.role);
    if (wanted.empty() || wanted.count(r.role) > 0) records.push_back(std::move(r));
  }
  if (!options.roles.empty()) {
    for (const std::string& role : wanted) {
      if (present.count(role) == 0) {
        std::string roles;
        for (const auto& p : present) roles += (roles.empty() ? "" : ", ") + p;
        return Status::NotFound(context + ": no tensor has role `" + role + "` (roles: " + roles + ")");
      }
    }
  }

  std::map<std::string, const TensorRecord*> by_name;
  uint64_t total = 0;
  for (const TensorRecord& r : records) {
    for (const std::string& name : ExportNames(view, r, options.model)) {
      if (!by_name.emplace(name, &r).second) {
        return Status::NotSupported(context + ": two tensors would be named `" + name + "` in the file");
      }
      total += r.bytes;
    }
  }
  if (by_name.empty() && options.model.has_value()) {
    return Status::NotFound(context + ": model `" + *options.model + "` has no tensor of the roles asked for");
  }

  ProgressBar progress("export", /*bytes=*/true);
  uint64_t done = 0;
  progress.Update(0, total);
  if (options.format == "safetensors") {
    std::vector<SafetensorsEntry> entries;
    for (const auto& [name, r] : by_name) entries.push_back({name, r->dtype, r->shape, r->bytes});
    std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                   {"trainsnap.step", std::to_string(options.step)}};
    auto writer = SafetensorsWriter::Create(options.out, std::move(entries), metadata);
    if (!writer.ok()) return writer.status();
    std::vector<uint8_t> buffer;
    for (const SafetensorsEntry& e : (*writer)->entries()) {
      const TensorRecord& r = *by_name.at(e.name);
      buffer.resize(r.bytes);
      TRAINSNAP_RETURN_IF_ERROR(
          store->ReadTensor(r, buffer.data(), buffer.size()).WithContext(context + ": tensor `" + e.name + "`"));
      TRAINSNAP_RETURN_IF_ERROR((*writer)->Append(buffer.data(), buffer.size()));
      done += r.bytes;
      progress.Update(done, total);
    }
    TRAINSNAP_RETURN_IF_ERROR((*writer)->Finish());
  } else {
    std::vector<TorchArchiveEntry> entries;
    for (const auto& [name, r] : by_name) entries.push_back({name, r->dtype, r->shape, r->bytes});
    auto writer = TorchArchiveWriter::Create(options.out, std::move(entries));
    if (!writer.ok()) return writer.status();
    for (const TorchArchiveEntry& e : (*writer)->entries()) {
      const TensorRecord& r = *by_name.at(e.name);
      auto bytes = ReadTensorBytes(*store, r);
      if (!bytes.ok()) return bytes.status().WithContext(context + ": tensor `" + e.name + "`");
      TRAINSNAP_RETURN_IF_ERROR((*writer)->Append(bytes->data(), bytes->size()));
      done += r.bytes;
      progress.Update(done, total);
    }
    TRAINSNAP_RETURN_IF_ERROR((*writer)->Finish());
  }
  progress.Finish();

  if (options.json) {
    nlohmann::json doc = JsonDocument("export");
    doc["store"] = options.store;
    doc["step"] = options.step;
    doc["format"] = options.format;
    doc["model"] = options.model ? nlohmann::json(*options.model) : nullptr;
    doc["out"] = options.out;
    doc["bytes"] = total;
    doc["tensors"] = nlohmann::json::array();
    for (const auto& [name, r] : by_name) {
      doc["tensors"].push_back({{"name", name},
                                {"param_id", HexId(r->param_id)},
                                {"role", r->role},
                                {"dtype", std::string(DTypeName(r->dtype))},
                                {"shape", r->shape},
                                {"bytes", r->bytes}});
    }
    PrintJson(doc);
  } else {
    std::cout << "exported " << by_name.size() << " tensors (" << HumanBytes(total) << ") of step " << options.step
              << " to " << options.out << " (" << options.format << ")\n";
  }
  return Status::OK();
}

}  // namespace

Command AddExportCommand(CLI::App& parent) {
  auto options = std::make_shared<ExportOptions>();
  CLI::App* app = parent.add_subcommand("export", "Write a snapshot to safetensors or a torch archive");
  app->footer("Writes a snapshot's tensors to a safetensors file or a torch file (a dict of tensors, "
              "torch.load). Names: parameters and buffers by their name, `<name>:<role>` for other roles. "
              "--model M writes M's state dict (parameters and buffers) under M's own names.");
  app->add_option("store", options->store, "Path of the store")->required();
  app->add_option("step", options->step, "Snapshot step")->required()->check(StepValidator());
  app->add_option("--format", options->format, "safetensors or torch")
      ->required()
      ->check(CLI::IsMember({"safetensors", "torch"}));
  app->add_option("--out", options->out,
                  "Output file: created, or a regular file replaced atomically (never a device, FIFO or directory)")
      ->required();
  app->add_option("--role", options->roles, "Only tensors of this role (param, buffer, grad, exp_avg, ...); repeatable");
  app->add_option("--model", options->model,
                  "Only model M (a TrainingState::models key; \"\" for TrainingState::model), under its own "
                  "names; default roles: param and buffer");
  app->add_flag("--json", options->json, "Print JSON (schema trainsnap.export/1, docs/cli.md)");
  return {app, [options] { return RunExport(*options); }};
}

}  // namespace trainsnap::cli
