// Writes tensors as a LibTorch archive (torch::serialize::OutputArchive, the
// format of torch::save): keys "0", "1", ... hold the tensors, so that
// torch::load(std::vector<torch::Tensor>&, path) reads them back in order;
// key "names" holds their names (a list of strings, same order) and "step"
// the snapshot's step. Read the names with torch::serialize::InputArchive::read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "trainsnap/status.h"

namespace trainsnap::cli {

// Writes to `path` + ".tmp", then renames into place.
Status WriteTorchArchive(const std::string& path, int64_t step, const std::vector<std::string>& names,
                         const std::vector<torch::Tensor>& tensors);

}  // namespace trainsnap::cli
