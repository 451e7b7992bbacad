// StagedKeys: the (param_id, role) pairs staged by one capture, to refuse a
// pair staged twice. A flat table: no allocation per member, unlike a
// node-based set of (id, string) pairs, whose 150,000 nodes per capture of
// 50,000 parameters cost a tenth of the time Stage held the training thread
// (issue 18).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/role_numbers.h"

namespace trainsnap::internal {

class StagedKeys {
 public:
  // Room for `n` pairs without growing.
  void Reserve(size_t n);
  // Adds the pair; false (and nothing changes) when it is already present.
  bool Insert(uint64_t param_id, std::string_view role);
  void Clear();
  size_t size() const { return size_; }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  struct Slot {
    uint64_t param_id = 0;
    uint32_t role = kEmpty;  // its number in roles_
  };
  // Open addressing, linear probing, at most half full. Parameter IDs are
  // XXH3 hashes already: their bits, mixed with the role, pick the slot.
  static size_t Home(uint64_t param_id, uint32_t role, size_t mask);
  void Grow(size_t slots);

  RoleNumbers roles_;
  std::vector<Slot> slots_;  // a power of two in size, or empty
  size_t size_ = 0;
};

}  // namespace trainsnap::internal
