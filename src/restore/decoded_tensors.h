// DecodedTensors: the host tensors one restore decoded, keyed by
// (param_id, role), for building the restore plan.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <torch/torch.h>

namespace trainsnap::internal {

// Kept in the order they were added (DecodeTensors: its `wanted` order), and
// looked up by trying the entry after the last one found first: the plan
// asks for every tensor once, in that same order. Any other order still
// works, through an index sorted on the first miss. Why not a hash map: at
// 150,000 tensors its nodes and string keys cost more per tensor than at
// 15,000 (to scale linearly with the parameter count). Not thread-safe, lookups included.
class DecodedTensors {
 public:
  void Reserve(size_t n) { entries_.reserve(n); }
  // A (param_id, role) added twice is found once; which one is unspecified.
  void Add(uint64_t param_id, std::string role, torch::Tensor tensor);
  // Adds every tensor of `other`, after this one's, and leaves `other` empty.
  void Append(DecodedTensors&& other);

  // The tensor of (param_id, role_prefix + role), or null. The pointer stays
  // valid until the next Add or Append.
  torch::Tensor* Find(uint64_t param_id, std::string_view role_prefix, std::string_view role);
  torch::Tensor* Find(uint64_t param_id, std::string_view role) { return Find(param_id, {}, role); }

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    uint64_t param_id = 0;
    std::string role;
    torch::Tensor tensor;
  };
  static bool Matches(const Entry& entry, uint64_t param_id, std::string_view role_prefix, std::string_view role);
  torch::Tensor* FindSorted(uint64_t param_id, std::string_view role_prefix, std::string_view role);

  std::vector<Entry> entries_;
  size_t next_ = 0;              // the entry after the last one found
  std::vector<size_t> sorted_;  // entries_ by (param_id, role); built on the first miss
};

}  // namespace trainsnap::internal
