// Writes tensors as a plain dict {name: tensor} in PyTorch's pickle format
// (torch::pickle_save, the zip layout torch.save writes): Python's
// torch.load returns a dict of tensors that load_state_dict and
// safetensors.torch.save_file take as is; LibTorch reads it with
// torch::pickle_load(bytes).toGenericDict(). Nothing else is in the dict
// (no step, no names list), so that it loads as a state dict.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "trainsnap/status.h"

namespace trainsnap::cli {

// names[i] -> tensors[i], in this order. Written through an OutputFile
// (output_file.h): atomically, and only over an absent or regular file.
Status WriteTorchStateDict(const std::string& path, const std::vector<std::string>& names,
                           const std::vector<torch::Tensor>& tensors);

}  // namespace trainsnap::cli
