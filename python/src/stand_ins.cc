#include "stand_ins.h"

#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "manifest.pb.h"
#include "torch/dtype.h"
#include "torch/manifest_codec.h"

namespace trainsnap::python {

namespace {

// Accepts any state and keeps none.
class DiscardStateful final : public Stateful {
 public:
  std::string SaveState() const override { return std::string(); }
  Status LoadState(std::string_view) override { return Status::OK(); }
};

class DiscardTensorStateful final : public TensorStateful {
 public:
  Status SaveState(TensorState* state) const override {
    *state = TensorState();
    return Status::OK();
  }
  Status LoadState(TensorState) override { return Status::OK(); }
};

// A module tree built from qualified names ("layer.0.weight"): the
// submodules are created on first use, in the order the names arrive.
class ModuleBuilder {
 public:
  ModuleBuilder() : root_(std::make_shared<torch::nn::Module>("StandIn")) {}

  void Add(const std::string& name, const torch::Tensor& tensor, bool parameter) {
    const size_t dot = name.rfind('.');
    torch::nn::Module& owner = dot == std::string::npos ? *root_ : Submodule(name.substr(0, dot));
    const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
    if (parameter) {
      owner.register_parameter(leaf, tensor, tensor.requires_grad());
    } else {
      owner.register_buffer(leaf, tensor);
    }
  }

  std::shared_ptr<torch::nn::Module> root() const { return root_; }

 private:
  torch::nn::Module& Submodule(const std::string& path) {
    auto found = modules_.find(path);
    if (found != modules_.end()) return *found->second;
    const size_t dot = path.rfind('.');
    torch::nn::Module& parent = dot == std::string::npos ? *root_ : Submodule(path.substr(0, dot));
    auto child = std::make_shared<torch::nn::Module>("StandIn");
    parent.register_module(dot == std::string::npos ? path : path.substr(dot + 1), child);
    modules_[path] = child;
    return *child;
  }

  std::shared_ptr<torch::nn::Module> root_;
  std::map<std::string, std::shared_ptr<torch::nn::Module>> modules_;
};

// `name` without the "key/" that qualifies the names of a named model.
std::string Unqualified(const std::string& key, const std::string& name) {
  if (key.empty()) return name;
  return name.substr(key.size() + 1);
}

Result<torch::Tensor> EmptyLike(const google::protobuf::RepeatedField<int64_t>& shape, uint32_t dtype_code) {
  TRAINSNAP_ASSIGN_OR_RETURN(c10::ScalarType dtype, internal::ToScalarType(static_cast<DType>(dtype_code)));
  return torch::empty(std::vector<int64_t>(shape.begin(), shape.end()), torch::TensorOptions().dtype(dtype));
}

// Model `key` of `manifest` as a module of fresh tensors: trainable
// parameters (tied names share one tensor) and buffers.
Result<std::shared_ptr<torch::nn::Module>> StandInModel(const proto::TrainingManifest& manifest,
                                                        const std::string& key) {
  const std::string what = key.empty() ? "the model" : "model `" + key + "`";
  for (const proto::FrozenParam& frozen : manifest.base().frozen()) {
    if (frozen.model() == key) {
      return Status::NotSupported("partial restore: " + what + " is left out and has frozen parameter `" +
                                  frozen.name() + "`, which checks the frozen base: give it");
    }
  }
  ModuleBuilder builder;
  torch::NoGradGuard no_grad;
  for (const proto::ContractParam& param : manifest.params()) {
    if (param.model() != key) continue;
    TRAINSNAP_ASSIGN_OR_RETURN(torch::Tensor tensor, EmptyLike(param.shape(), param.dtype()));
    tensor.set_requires_grad(true);
    for (const std::string& name : param.names()) builder.Add(Unqualified(key, name), tensor, /*parameter=*/true);
  }
  for (const proto::ModelTensor& stored : manifest.model_tensors()) {
    if (stored.model() != key) continue;
    if (stored.role() != "buffer") {
      return Status::NotSupported("partial restore: " + what + " is left out and has frozen parameter `" +
                                  (stored.names().empty() ? std::string("?") : stored.names(0)) + "`: give it");
    }
    TRAINSNAP_ASSIGN_OR_RETURN(torch::Tensor tensor, EmptyLike(stored.shape(), stored.dtype()));
    for (const std::string& name : stored.names()) builder.Add(Unqualified(key, name), tensor, /*parameter=*/false);
  }
  return builder.root();
}

}  // namespace

Status AddStandIns(Store& store, int64_t step, TrainingState* target, StandIns* out) {
  TRAINSNAP_ASSIGN_OR_RETURN(proto::TrainingManifest manifest, internal::ReadManifest(store, step));
  for (const std::string& key : manifest.models()) {
    const bool given = key.empty() ? target->model != nullptr : target->models.count(key) != 0;
    if (given) continue;
    TRAINSNAP_ASSIGN_OR_RETURN(std::shared_ptr<torch::nn::Module> model, StandInModel(manifest, key));
    if (key.empty()) {
      target->model = model.get();
    } else {
      target->models[key] = model.get();
    }
    out->models.push_back(std::move(model));
  }
  if (!manifest.optimizers().empty() && target->optimizer == nullptr && target->optimizers.empty()) {
    return Status::NotSupported(
        "partial restore: the snapshot holds C++ "
        "optimizer state; give the optimizers");
  }
  if (manifest.has_scheduler() && target->scheduler == nullptr) {
    return Status::NotSupported("partial restore: the snapshot holds a C++ scheduler; give it");
  }
  if (manifest.has_accumulation() && target->accumulation == nullptr) {
    out->accumulation = std::make_unique<AccumulationWindow>();
    target->accumulation = out->accumulation.get();
  }
  for (const proto::ExtraState& extra : manifest.extra()) {
    if (target->extra.count(extra.name()) || target->tensor_extra.count(extra.name())) continue;
    if (extra.has_tensors()) {
      out->tensor_extras.push_back(std::make_unique<DiscardTensorStateful>());
      target->tensor_extra[extra.name()] = out->tensor_extras.back().get();
    } else {
      out->extras.push_back(std::make_unique<DiscardStateful>());
      target->extra[extra.name()] = out->extras.back().get();
    }
  }
  return Status::OK();
}

}  // namespace trainsnap::python
