// RecordKey: a tensor's identity within a snapshot, (param_id, role), and
// its hash for the store's per-tensor tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

namespace trainsnap::internal {

using RecordKey = std::pair<uint64_t, std::string>;  // (param_id, role)

struct RecordKeyHash {
  size_t operator()(const RecordKey& key) const {
    return std::hash<uint64_t>()(key.first) ^ (std::hash<std::string>()(key.second) * 0x9e3779b97f4a7c15ull);
  }
};

}  // namespace trainsnap::internal
