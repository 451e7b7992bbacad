// RoleNumbers: the distinct tensor roles of one snapshot (param, grad,
// buffer, extra, optimizer state names), numbered by first sight, so that a
// (param_id, role) key becomes two integers to hash or sort. A linear
// search: a snapshot has few roles, and comparing a few short strings costs
// less than hashing each one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trainsnap::internal {

class RoleNumbers {
 public:
  uint32_t Of(std::string_view role) {
    for (size_t i = 0; i < roles_.size(); ++i) {
      if (roles_[i] == role) return static_cast<uint32_t>(i);
    }
    roles_.emplace_back(role);
    return static_cast<uint32_t>(roles_.size() - 1);
  }

 private:
  std::vector<std::string> roles_;
};

}  // namespace trainsnap::internal
