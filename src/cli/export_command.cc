// trainsnap export STORE STEP --format safetensors|torch --out FILE [--role R]...
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/human_format.h"
#include "cli/json_output.h"
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
  std::vector<std::string> roles;  // empty = every role
  bool json = false;
};

// The name of a tensor in the exported file: the parameter's first
// qualified name for role "param" (so weights load by name), else
// "<name>:<role>" (e.g. "fc.weight:exp_avg").
std::string ExportName(const ManifestView& view, const TensorRecord& record) {
  std::string name = view.Name(record.param_id);
  return record.role == "param" ? name : name + ":" + record.role;
}

Status RunExport(const ExportOptions& options) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenForReading(options.store));
  TRAINSNAP_RETURN_IF_ERROR(RequireStep(*store, options.step).status());
  const std::string context = "export step " + std::to_string(options.step);
  auto manifest = store->Manifest(options.step);
  if (!manifest.ok()) return manifest.status().WithContext(context + ": manifest");
  ManifestView view = ManifestView::Parse(*manifest);
  auto all = store->Tensors(options.step);
  if (!all.ok()) return all.status().WithContext(context + ": tensor records");

  std::set<std::string> wanted(options.roles.begin(), options.roles.end());
  std::set<std::string> present;
  std::vector<TensorRecord> records;
  for (TensorRecord& r : *all) {
    present.insert(r.role);
    if (wanted.empty() || wanted.count(r.role) > 0) records.push_back(std::move(r));
  }
  for (const std::string& role : wanted) {
    if (present.count(role) == 0) {
      std::string roles;
      for (const auto& p : present) roles += (roles.empty() ? "" : ", ") + p;
      return Status::NotFound(context + ": no tensor has role `" + role + "` (roles: " + roles + ")");
    }
  }

  std::map<std::string, const TensorRecord*> by_name;
  uint64_t total = 0;
  for (const TensorRecord& r : records) {
    std::string name = ExportName(view, r);
    if (!by_name.emplace(name, &r).second) return Status::InvalidArgument(context + ": two tensors named `" + name + "`");
    total += r.bytes;
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
    if (!writer.ok()) return writer.status().WithContext(context);
    std::vector<uint8_t> buffer;
    for (const SafetensorsEntry& e : (*writer)->entries()) {
      const TensorRecord& r = *by_name.at(e.name);
      buffer.resize(r.bytes);
      TRAINSNAP_RETURN_IF_ERROR(
          store->ReadTensor(r, buffer.data(), buffer.size()).WithContext(context + ": tensor `" + e.name + "`"));
      TRAINSNAP_RETURN_IF_ERROR((*writer)->Append(buffer.data(), buffer.size()).WithContext(context));
      done += r.bytes;
      progress.Update(done, total);
    }
    TRAINSNAP_RETURN_IF_ERROR((*writer)->Finish().WithContext(context));
  } else {
    std::vector<std::string> names;
    std::vector<torch::Tensor> tensors;
    for (const auto& [name, r] : by_name) {
      auto tensor = ReadAsTorch(*store, *r);
      if (!tensor.ok()) return tensor.status().WithContext(context + ": tensor `" + name + "`");
      names.push_back(name);
      tensors.push_back(std::move(*tensor));
      done += r->bytes;
      progress.Update(done, total);
    }
    TRAINSNAP_RETURN_IF_ERROR(WriteTorchArchive(options.out, options.step, names, tensors).WithContext(context));
  }
  progress.Finish();

  if (options.json) {
    nlohmann::json doc = JsonDocument("export");
    doc["store"] = options.store;
    doc["step"] = options.step;
    doc["format"] = options.format;
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
  app->footer("Writes a snapshot's tensors to a safetensors file or a torch::save archive. "
              "Tensor names: the parameter name for role `param`, `<name>:<role>` otherwise.");
  app->add_option("store", options->store, "Path of the store")->required();
  app->add_option("step", options->step, "Snapshot step")->required();
  app->add_option("--format", options->format, "safetensors or torch")
      ->required()
      ->check(CLI::IsMember({"safetensors", "torch"}));
  app->add_option("--out", options->out, "Output file (written atomically)")->required();
  app->add_option("--role", options->roles, "Only tensors of this role (param, grad, exp_avg, ...); repeatable");
  app->add_flag("--json", options->json, "Print JSON (schema trainsnap.export/1, docs/cli.md)");
  return {app, [options] { return RunExport(*options); }};
}

}  // namespace trainsnap::cli
