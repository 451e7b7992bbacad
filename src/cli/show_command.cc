// trainsnap show STORE STEP: one snapshot's manifest and tensors.
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/human_format.h"
#include "cli/json_output.h"
#include "cli/param_names.h"
#include "cli/store_access.h"
#include "cli/table.h"
#include "manifest.pb.h"

namespace trainsnap::cli {

namespace {

struct ShowOptions {
  std::string store;
  int64_t step = 0;
  bool json = false;
};

std::string DTypeString(uint32_t code) { return std::string(DTypeName(static_cast<DType>(code))); }

// Values of trainsnap::ModelState (checkpointer.h), as the manifest stores them.
std::string ModelStateName(uint32_t value) {
  switch (value) {
    case 0: return "trainable";
    case 1: return "trainable+buffers";
    case 2: return "full";
    default: return "unknown (" + std::to_string(value) + ")";
  }
}

std::string GradStateName(proto::GradState state) {
  switch (state) {
    case proto::GRAD_UNDEFINED: return "undefined";
    case proto::GRAD_ZERO: return "zero";
    case proto::GRAD_STORED: return "stored";
    case proto::GRAD_OMITTED: return "omitted";
    default: return "unknown";
  }
}

std::string Join(const google::protobuf::RepeatedPtrField<std::string>& items, size_t from) {
  std::string out;
  for (int i = static_cast<int>(from); i < items.size(); ++i) {
    if (!out.empty()) out += ", ";
    out += items[i];
  }
  return out;
}

std::vector<int64_t> Shape(const google::protobuf::RepeatedField<int64_t>& shape) {
  return {shape.begin(), shape.end()};
}

// The options that matter for the optimizer type, "name=value" separated by spaces.
std::string GroupOptionsString(const std::string& type, const proto::GroupOptions& o) {
  std::ostringstream out;
  auto d = [](double v) { return HumanDouble(v, 6); };
  out << "lr=" << d(o.lr());
  if (type == "Adam" || type == "AdamW") {
    out << " betas=(" << d(o.beta1()) << ", " << d(o.beta2()) << ") eps=" << d(o.eps())
        << " weight_decay=" << d(o.weight_decay()) << " amsgrad=" << (o.amsgrad() ? "true" : "false");
  } else if (type == "SGD") {
    out << " momentum=" << d(o.momentum()) << " dampening=" << d(o.dampening())
        << " weight_decay=" << d(o.weight_decay()) << " nesterov=" << (o.nesterov() ? "true" : "false");
  } else if (type == "RMSprop") {
    out << " alpha=" << d(o.alpha()) << " eps=" << d(o.eps()) << " weight_decay=" << d(o.weight_decay())
        << " momentum=" << d(o.momentum()) << " centered=" << (o.centered() ? "true" : "false");
  } else if (type == "Adagrad") {
    out << " lr_decay=" << d(o.lr_decay()) << " weight_decay=" << d(o.weight_decay())
        << " initial_accumulator_value=" << d(o.initial_accumulator_value()) << " eps=" << d(o.eps());
  } else {
    out << " weight_decay=" << d(o.weight_decay());
  }
  return out.str();
}

void PrintManifest(const ManifestView& view, std::ostream& out) {
  const proto::TrainingManifest& m = *view.manifest();
  out << "manifest: format version " << m.format_version() << ", model state " << ModelStateName(m.model_state())
      << "\n";
  if (m.models_size() > 0) {
    out << "models:";
    for (const auto& model : m.models()) out << " " << (model.empty() ? "(default)" : model);
    out << "\n";
  }

  out << "\ncontract: " << m.params_size() << " trainable parameters\n";
  if (m.params_size() > 0) {
    Table contract({{"NAME"}, {"ID"}, {"SHAPE"}, {"DTYPE"}, {"GRAD"}, {"DEVICE"}, {"TIED NAMES"}});
    for (const auto& p : m.params()) {
      std::string name = p.names_size() > 0 ? p.names(0) : HexId(p.id());
      contract.AddRow({name, HexId(p.id()), ShapeString(Shape(p.shape())), DTypeString(p.dtype()),
                       GradStateName(p.grad()), p.device(), Join(p.names(), 1)});
    }
    out << contract.Render();
  }

  if (m.model_tensors_size() > 0) {
    out << "\nmodel tensors: " << m.model_tensors_size() << "\n";
    Table tensors({{"NAME"}, {"ID"}, {"ROLE"}, {"SHAPE"}, {"DTYPE"}, {"SHARED NAMES"}});
    for (const auto& t : m.model_tensors()) {
      std::string name = t.names_size() > 0 ? t.names(0) : HexId(t.id());
      tensors.AddRow({name, HexId(t.id()), t.role(), ShapeString(Shape(t.shape())), DTypeString(t.dtype()),
                      Join(t.names(), 1)});
    }
    out << tensors.Render();
  }

  const proto::BaseIdentity& base = m.base();
  out << "\nbase identity: " << base.frozen_size() << " frozen parameters";
  if (!base.label().empty()) out << ", label \"" << base.label() << "\"";
  if (base.has_content_hash()) out << ", content hash " << HexId(base.content_hash());
  out << "\n";

  for (const auto& opt : m.optimizers()) {
    out << "\noptimizer " << (opt.name().empty() ? "(default)" : "\"" + opt.name() + "\"") << ": " << opt.type()
        << ", " << opt.groups_size() << " param groups, state for " << opt.params_size() << " parameters";
    if (!opt.role_prefix().empty()) out << ", roles prefixed \"" << opt.role_prefix() << "\"";
    out << "\n";
    for (int g = 0; g < opt.groups_size(); ++g) {
      const auto& group = opt.groups(g);
      out << "  group " << g << " (" << group.param_ids_size() << " params): "
          << GroupOptionsString(opt.type(), group.options()) << "\n";
    }
    if (opt.params_size() > 0) {
      Table state({{"PARAMETER"}, {"STEP", Align::kRight}, {"STATE TENSORS"}});
      for (const auto& p : opt.params()) state.AddRow({view.Name(p.param_id()), std::to_string(p.step()),
                                                       Join(p.roles(), 0)});
      std::istringstream lines(state.Render());
      for (std::string line; std::getline(lines, line);) out << "  " << line << "\n";
    }
  }
  if (m.has_scheduler()) out << "\nscheduler: step_count " << m.scheduler().step_count() << "\n";
  if (m.has_accumulation()) {
    const auto& a = m.accumulation();
    out << "accumulation window: micro-step " << a.micro_step() << " of " << a.size() << ", weight sum "
        << HumanDouble(a.weight_sum(), 8) << ", scale " << HumanDouble(a.scale(), 8) << "\n";
  }
  if (m.has_rng()) {
    out << "rng:";
    for (const auto& g : m.rng()) out << " " << g.device() << " (" << g.state().size() << " B)";
    out << "\n";
  }
  if (m.extra_size() > 0) {
    out << "extra:";
    for (const auto& e : m.extra()) {
      out << " " << e.name() << " (";
      // A TensorStateful (Python optimizers, schedulers, extras) names its type.
      if (e.has_tensors()) out << e.type() << ", " << e.tensors_size() << " tensors, ";
      out << e.state().size() << " B)";
    }
    out << "\n";
  }
}

Status RunShow(const ShowOptions& options) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenForReading(options.store));
  TRAINSNAP_ASSIGN_OR_RETURN(SnapshotInfo info, RequireStep(*store, options.step));
  const std::string context = "step " + std::to_string(options.step);
  auto read = ManifestView::Read(*store, options.step);
  if (!read.ok()) return read.status().WithContext(context + ": manifest");
  auto records = store->Tensors(options.step);
  if (!records.ok()) return records.status().WithContext(context + ": tensor records");
  ManifestView view = std::move(*read);
  // Readers look parameters up by name: sort by name, then role (the store
  // returns them by ID).
  std::stable_sort(records->begin(), records->end(), [&](const TensorRecord& x, const TensorRecord& y) {
    std::string nx = view.Name(x.param_id), ny = view.Name(y.param_id);
    return nx != ny ? nx < ny : x.role < y.role;
  });

  if (options.json) {
    nlohmann::json doc = JsonDocument("show");
    doc["store"] = options.store;
    doc["info"] = SnapshotInfoJson(info);
    doc["manifest"] = nullptr;
    doc["manifest_error"] = view.error().empty() ? nlohmann::json(nullptr) : nlohmann::json(view.error());
    if (view.manifest() != nullptr) {
      google::protobuf::util::JsonPrintOptions print;
      print.always_print_primitive_fields = true;
      print.preserve_proto_field_names = true;
      std::string text;
      auto converted = google::protobuf::util::MessageToJsonString(*view.manifest(), &text, print);
      if (!converted.ok()) return Status::Aborted(context + ": manifest to JSON: " + converted.ToString());
      doc["manifest"] = nlohmann::json::parse(text);
    }
    doc["tensors"] = nlohmann::json::array();
    for (const TensorRecord& r : *records) {
      uint64_t stored = 0;
      for (const ChunkRef& c : r.chunks) stored += c.stored_bytes;
      doc["tensors"].push_back({{"param_id", HexId(r.param_id)},
                                {"name", view.Name(r.param_id)},
                                {"role", r.role},
                                {"dtype", std::string(DTypeName(r.dtype))},
                                {"shape", r.shape},
                                {"bytes", r.bytes},
                                {"chunks", r.chunks.size()},
                                {"stored_bytes", stored}});
    }
    PrintJson(doc);
    return Status::OK();
  }

  std::ostringstream out;
  out << "snapshot " << info.step << " of " << options.store << ", created " << HumanTime(info.created_unix_ms)
      << " UTC\n";
  out << "  " << info.tensors << " tensors, " << info.chunks << " chunks; logical " << HumanBytes(info.logical_bytes)
      << ", stored " << HumanBytes(info.stored_bytes) << ", new " << HumanBytes(info.new_bytes) << " ("
      << info.new_chunks << " chunks), manifest " << HumanBytes(info.manifest_bytes) << "\n\n";
  if (view.manifest() != nullptr) {
    PrintManifest(view, out);
  } else if (!view.error().empty()) {
    out << "manifest: " << view.error() << "; parameter IDs shown in hex\n";
  } else {
    out << "manifest: none (written through the Store API); parameter IDs shown in hex\n";
  }
  out << "\ntensors: " << records->size() << "\n";
  Table table({{"NAME"}, {"ROLE"}, {"DTYPE"}, {"SHAPE"}, {"SIZE", Align::kRight}, {"CHUNKS", Align::kRight},
               {"STORED", Align::kRight}});
  for (const TensorRecord& r : *records) {
    uint64_t stored = 0;
    for (const ChunkRef& c : r.chunks) stored += c.stored_bytes;
    table.AddRow({view.Name(r.param_id), r.role, std::string(DTypeName(r.dtype)), ShapeString(r.shape),
                  HumanBytes(r.bytes), std::to_string(r.chunks.size()), HumanBytes(stored)});
  }
  if (!records->empty()) out << table.Render();
  std::cout << out.str();
  return Status::OK();
}

}  // namespace

Command AddShowCommand(CLI::App& parent) {
  auto options = std::make_shared<ShowOptions>();
  CLI::App* app = parent.add_subcommand("show", "Show a snapshot's manifest and tensors");
  app->footer("A snapshot's manifest: contract (parameters, shapes, dtypes, tied names), model-state "
              "selection, base identity, optimizers and their groups, scheduler, accumulation window, "
              "extra keys; and its tensors with their sizes.");
  app->add_option("store", options->store, "Path of the store")->required();
  app->add_option("step", options->step, "Snapshot step")->required()->check(StepValidator());
  app->add_flag("--json", options->json, "Print JSON (schema trainsnap.show/1, docs/cli.md)");
  return {app, [options] { return RunShow(*options); }};
}

}  // namespace trainsnap::cli
