// The parameters and buffers of a module tree, visited in place: the order
// and names of Module::named_parameters() and named_buffers() (recurse),
// without the dictionary copies those build on every call (at 50,000
// parameters the copies were a third of building the contract).
#pragma once

#include <string>

#include <torch/torch.h>

namespace trainsnap::internal {

// A module's own parameters, read in place. LibTorch keeps them in a
// protected member and offers only copies (named_parameters); a pointer to
// that member, formed through a derived class, is the standard's way to
// read a protected member of a base object ([class.protected]).
class ModuleParameters : public torch::nn::Module {
 public:
  static const torch::OrderedDict<std::string, torch::Tensor>& Of(const torch::nn::Module& module) {
    return module.*(&ModuleParameters::parameters_);
  }
};

// Calls on_module(prefix, module) for `root` and every descendant, in the
// pre-order of Module::apply (prefix "" for the root, else the dotted path),
// then on_param(prefix, key, tensor) for each of that module's defined
// parameters and on_buffer(prefix, key, tensor) for each of its defined
// buffers, in registration order. Per category this is exactly the order
// of named_parameters()/named_buffers(), whose names are
// JoinName(prefix, key). May throw what LibTorch throws.
template <typename OnModule, typename OnParam, typename OnBuffer>
void WalkModule(const torch::nn::Module& root, OnModule&& on_module, OnParam&& on_param, OnBuffer&& on_buffer) {
  root.apply([&](const std::string& prefix, const torch::nn::Module& module) {
    on_module(prefix, module);
    for (const auto& item : ModuleParameters::Of(module)) {
      if (item.value().defined()) on_param(prefix, item.key(), item.value());
    }
    // Buffers are private in LibTorch: the copy of this module's own (none
    // for most modules) is the only way to read them with their names.
    for (const auto& item : module.named_buffers(/*recurse=*/false)) on_buffer(prefix, item.key(), item.value());
  });
}

// LibTorch's name of `key` in the module at `prefix`: "prefix.key", or
// "key" at the root.
inline std::string JoinName(const std::string& prefix, const std::string& key) {
  if (prefix.empty()) return key;
  std::string name;
  name.reserve(prefix.size() + 1 + key.size());
  name.append(prefix).append(1, '.').append(key);
  return name;
}

}  // namespace trainsnap::internal
