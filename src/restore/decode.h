// Decode: read the tensors a restore needs from the store into fresh host
// staging tensors, verifying every chunk hash. Touches no live object.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

using DecodedKey = std::pair<uint64_t, std::string>;  // (param_id, role)
struct DecodedKeyHash {
  size_t operator()(const DecodedKey& key) const {
    return std::hash<uint64_t>()(key.first) ^ (std::hash<std::string>()(key.second) * 0x9e3779b97f4a7c15ull);
  }
};
// Hashed, not ordered: the plan looks every tensor up once, in manifest
// order; at 150,000 string-keyed nodes an ordered map's look-ups and
// inserts grew faster than the count (issue 18: linear scaling).
using DecodedTensors = std::unordered_map<DecodedKey, torch::Tensor, DecodedKeyHash>;

// A tensor the manifest says the snapshot holds, with what it must look like.
struct WantedTensor {
  uint64_t param_id = 0;
  std::string role;
  std::string name;            // qualified name, for error messages
  std::vector<int64_t> shape;  // expected shape
  std::optional<DType> dtype;  // expected dtype, when the manifest fixes it
};

// Reads every wanted tensor of snapshot `step`. Corruption when one is
// missing, disagrees with its expected shape/dtype, or fails a chunk hash
// (the message names the tensor and role). All chunks are read in one
// Store::ReadTensors (batched MultiGets, decoded in parallel on the store's
// workers); the error reported is the first in `wanted` order.
Result<DecodedTensors> DecodeTensors(Store& store, int64_t step, const std::vector<WantedTensor>& wanted);

}  // namespace trainsnap::internal
