// trainsnap diff STORE A B: what changed between two snapshots, per
// parameter and role, and in the contract.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/human_format.h"
#include "cli/json_output.h"
#include "cli/param_names.h"
#include "cli/progress_bar.h"
#include "cli/store_access.h"
#include "cli/table.h"
#include "cli/tensor_decode.h"
#include "cli/tensor_values.h"
#include "manifest.pb.h"

namespace trainsnap::cli {

namespace {

struct DiffOptions {
  std::string store;
  int64_t a = 0;
  int64_t b = 0;
  bool json = false;
};

struct TensorDiff {
  uint64_t param_id = 0;
  std::string role;
  std::string name;
  std::string status;  // unchanged | changed | reshaped | added | removed
  const TensorRecord* a = nullptr;
  const TensorRecord* b = nullptr;
  uint64_t chunks_total = 0;
  uint64_t chunks_changed = 0;
  std::optional<double> max_abs_diff;  // only when dtype and shape agree
  std::optional<double> relative_l2;   // ||b - a|| / ||a||; nullopt when undefined
};

struct ContractDiff {
  uint64_t param_id = 0;
  std::string name;
  std::string kind;  // added | removed | names | shape | dtype | base
  std::string a;
  std::string b;
};

std::string JoinNames(const google::protobuf::RepeatedPtrField<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::vector<ContractDiff> CompareContracts(const ManifestView& a, const ManifestView& b) {
  std::vector<ContractDiff> out;
  if (a.manifest() == nullptr || b.manifest() == nullptr) return out;
  std::map<uint64_t, const proto::ContractParam*> pa, pb;
  for (const auto& p : a.manifest()->params()) pa[p.id()] = &p;
  for (const auto& p : b.manifest()->params()) pb[p.id()] = &p;
  for (const auto& [id, p] : pa) {
    auto it = pb.find(id);
    if (it == pb.end()) {
      out.push_back({id, a.Name(id), "removed", ShapeString({p->shape().begin(), p->shape().end()}), ""});
      continue;
    }
    const proto::ContractParam* q = it->second;
    std::vector<int64_t> sa(p->shape().begin(), p->shape().end()), sb(q->shape().begin(), q->shape().end());
    if (JoinNames(p->names()) != JoinNames(q->names())) {
      out.push_back({id, a.Name(id), "names", JoinNames(p->names()), JoinNames(q->names())});
    }
    if (sa != sb) out.push_back({id, a.Name(id), "shape", ShapeString(sa), ShapeString(sb)});
    if (p->dtype() != q->dtype()) {
      out.push_back({id, a.Name(id), "dtype", std::string(DTypeName(static_cast<DType>(p->dtype()))),
                     std::string(DTypeName(static_cast<DType>(q->dtype())))});
    }
  }
  for (const auto& [id, q] : pb) {
    if (pa.count(id) == 0) {
      out.push_back({id, b.Name(id), "added", "", ShapeString({q->shape().begin(), q->shape().end()})});
    }
  }
  const auto& base_a = a.manifest()->base();
  const auto& base_b = b.manifest()->base();
  auto base_string = [](const proto::BaseIdentity& base) {
    std::string s = std::to_string(base.frozen_size()) + " frozen";
    if (!base.label().empty()) s += ", label \"" + base.label() + "\"";
    if (base.has_content_hash()) s += ", content " + HexId(base.content_hash());
    return s;
  };
  if (base_a.SerializeAsString() != base_b.SerializeAsString()) {
    out.push_back({0, "(frozen base)", "base", base_string(base_a), base_string(base_b)});
  }
  return out;
}

Status RunDiff(const DiffOptions& options) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenForReading(options.store));
  TRAINSNAP_ASSIGN_OR_RETURN(SnapshotInfo info_a, RequireStep(*store, options.a));
  TRAINSNAP_ASSIGN_OR_RETURN(SnapshotInfo info_b, RequireStep(*store, options.b));
  (void)info_a;
  (void)info_b;
  auto load = [&](int64_t step) -> Result<std::pair<std::vector<TensorRecord>, ManifestView>> {
    const std::string context = "step " + std::to_string(step);
    auto view = ManifestView::Read(*store, step);
    if (!view.ok()) return view.status().WithContext(context + ": manifest");
    auto records = store->Tensors(step);
    if (!records.ok()) return records.status().WithContext(context + ": tensor records");
    return std::make_pair(std::move(*records), std::move(*view));
  };
  TRAINSNAP_ASSIGN_OR_RETURN(auto side_a, load(options.a));
  TRAINSNAP_ASSIGN_OR_RETURN(auto side_b, load(options.b));

  std::map<std::pair<uint64_t, std::string>, TensorDiff> diffs;
  for (const TensorRecord& r : side_a.first) {
    TensorDiff& d = diffs[{r.param_id, r.role}];
    d.param_id = r.param_id;
    d.role = r.role;
    d.name = side_a.second.Name(r.param_id);
    d.a = &r;
  }
  for (const TensorRecord& r : side_b.first) {
    TensorDiff& d = diffs[{r.param_id, r.role}];
    d.param_id = r.param_id;
    d.role = r.role;
    if (d.a == nullptr || !side_a.second.Knows(r.param_id)) d.name = side_b.second.Name(r.param_id);
    d.b = &r;
  }

  // Chunk lists first (cheap); values only where dtype and shape agree and
  // some chunk differs.
  uint64_t decode_total = 0;
  for (auto& [key, d] : diffs) {
    size_t na = d.a ? d.a->chunks.size() : 0, nb = d.b ? d.b->chunks.size() : 0;
    d.chunks_total = std::max(na, nb);
    for (size_t i = 0; i < d.chunks_total; ++i) {
      bool same = i < na && i < nb && d.a->chunks[i].hash == d.b->chunks[i].hash;
      if (!same) ++d.chunks_changed;
    }
    if (d.a == nullptr) {
      d.status = "added";
    } else if (d.b == nullptr) {
      d.status = "removed";
    } else if (d.a->dtype != d.b->dtype || d.a->shape != d.b->shape) {
      d.status = "reshaped";
    } else if (d.chunks_changed == 0) {
      d.status = "unchanged";
      d.max_abs_diff = 0.0;
      d.relative_l2 = 0.0;
    } else {
      d.status = "changed";
      decode_total += d.a->bytes + d.b->bytes;
    }
  }
  {
    ProgressBar progress("diff", /*bytes=*/true);
    uint64_t decoded = 0;
    progress.Update(0, decode_total);
    for (auto& [key, d] : diffs) {
      if (d.status != "changed") continue;
      const std::string context = "tensor `" + d.name + "` role " + d.role;
      auto ta = ReadTensorBytes(*store, *d.a);
      if (!ta.ok()) return ta.status().WithContext("step " + std::to_string(options.a) + ": " + context);
      auto tb = ReadTensorBytes(*store, *d.b);
      if (!tb.ok()) return tb.status().WithContext("step " + std::to_string(options.b) + ": " + context);
      // Same dtype and shape (status "changed"), so the same element count.
      auto values = CompareValues(d.a->dtype, ta->data(), tb->data(), ta->size() / DTypeSize(d.a->dtype));
      if (!values.ok()) return values.status().WithContext(context);
      d.max_abs_diff = values->max_abs_diff;
      d.relative_l2 = values->relative_l2;
      decoded += d.a->bytes + d.b->bytes;
      progress.Update(decoded, decode_total);
    }
  }
  std::vector<ContractDiff> contract = CompareContracts(side_a.second, side_b.second);
  // Output order: by name, then role.
  std::vector<const TensorDiff*> rows;
  for (const auto& [key, d] : diffs) rows.push_back(&d);
  std::stable_sort(rows.begin(), rows.end(), [](const TensorDiff* x, const TensorDiff* y) {
    return x->name != y->name ? x->name < y->name : x->role < y->role;
  });

  uint64_t changed = 0, added = 0, removed = 0, reshaped = 0, chunks_changed = 0, chunks_total = 0;
  for (const auto& [key, d] : diffs) {
    changed += d.status == "changed";
    added += d.status == "added";
    removed += d.status == "removed";
    reshaped += d.status == "reshaped";
    chunks_changed += d.chunks_changed;
    chunks_total += d.chunks_total;
  }

  if (options.json) {
    nlohmann::json doc = JsonDocument("diff");
    doc["store"] = options.store;
    doc["a"] = options.a;
    doc["b"] = options.b;
    doc["tensors"] = nlohmann::json::array();
    for (const TensorDiff* row : rows) {
      const TensorDiff& d = *row;
      nlohmann::json t = {{"param_id", HexId(d.param_id)},
                          {"name", d.name},
                          {"role", d.role},
                          {"status", d.status},
                          {"dtype_a", d.a ? nlohmann::json(std::string(DTypeName(d.a->dtype))) : nullptr},
                          {"dtype_b", d.b ? nlohmann::json(std::string(DTypeName(d.b->dtype))) : nullptr},
                          {"shape_a", d.a ? nlohmann::json(d.a->shape) : nullptr},
                          {"shape_b", d.b ? nlohmann::json(d.b->shape) : nullptr},
                          {"chunks", d.chunks_total},
                          {"chunks_changed", d.chunks_changed},
                          {"changed_chunk_fraction",
                           d.chunks_total == 0 ? 0.0 : static_cast<double>(d.chunks_changed) / d.chunks_total},
                          {"max_abs_diff", OptionalJson(d.max_abs_diff)},
                          {"relative_l2", OptionalJson(d.relative_l2)}};
      doc["tensors"].push_back(std::move(t));
    }
    doc["contract"] = {{"compared", side_a.second.manifest() != nullptr && side_b.second.manifest() != nullptr},
                       {"differences", nlohmann::json::array()}};
    for (const ContractDiff& c : contract) {
      doc["contract"]["differences"].push_back(
          {{"param_id", HexId(c.param_id)}, {"name", c.name}, {"kind", c.kind}, {"a", c.a}, {"b", c.b}});
    }
    doc["summary"] = {{"tensors", diffs.size()}, {"changed", changed},       {"added", added},
                      {"removed", removed},       {"reshaped", reshaped},     {"chunks", chunks_total},
                      {"chunks_changed", chunks_changed}};
    PrintJson(doc);
    return Status::OK();
  }

  std::ostringstream out;
  out << "diff " << options.a << " -> " << options.b << ": " << diffs.size() << " tensors, " << changed
      << " changed, " << added << " added, " << removed << " removed, " << reshaped << " reshaped; "
      << chunks_changed << " of " << chunks_total << " chunks differ\n";
  Table table({{"NAME"}, {"ROLE"}, {"STATUS"}, {"CHANGED CHUNKS", Align::kRight}, {"MAX ABS DIFF", Align::kRight},
               {"REL L2", Align::kRight}});
  for (const TensorDiff* row : rows) {
    const TensorDiff& d = *row;
    char fraction[64];
    std::snprintf(fraction, sizeof(fraction), "%llu/%llu (%.0f%%)", static_cast<unsigned long long>(d.chunks_changed),
                  static_cast<unsigned long long>(d.chunks_total),
                  d.chunks_total == 0 ? 0.0 : 100.0 * d.chunks_changed / d.chunks_total);
    table.AddRow({d.name, d.role, d.status, fraction, d.max_abs_diff ? HumanDouble(*d.max_abs_diff) : "-",
                  d.relative_l2 ? HumanDouble(*d.relative_l2) : "-"});
  }
  if (!diffs.empty()) out << table.Render();
  if (side_a.second.manifest() == nullptr || side_b.second.manifest() == nullptr) {
    out << "\ncontract: not compared (a snapshot has no checkpointer manifest)\n";
  } else if (contract.empty()) {
    out << "\ncontract: identical\n";
  } else {
    out << "\ncontract: " << contract.size() << " differences\n";
    Table ct({{"NAME"}, {"DIFFERENCE"}, {"IN " + std::to_string(options.a)}, {"IN " + std::to_string(options.b)}});
    for (const ContractDiff& c : contract) ct.AddRow({c.name, c.kind, c.a, c.b});
    out << ct.Render();
  }
  std::cout << out.str();
  return Status::OK();
}

}  // namespace

Command AddDiffCommand(CLI::App& parent) {
  auto options = std::make_shared<DiffOptions>();
  CLI::App* app = parent.add_subcommand("diff", "Compare two snapshots");
  app->footer("Per parameter and role: fraction of changed chunks, max absolute difference and "
              "relative L2 change ||B-A||/||A|| (in float64); and contract differences.");
  app->add_option("store", options->store, "Path of the store")->required();
  app->add_option("a", options->a, "First snapshot step")->required()->check(StepValidator());
  app->add_option("b", options->b, "Second snapshot step")->required()->check(StepValidator());
  app->add_flag("--json", options->json, "Print JSON (schema trainsnap.diff/1, docs/cli.md)");
  return {app, [options] { return RunDiff(*options); }};
}

}  // namespace trainsnap::cli
