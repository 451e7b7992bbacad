#include "restore/decoded_tensors.h"

#include <algorithm>
#include <tuple>

namespace trainsnap::internal {

void DecodedTensors::Add(uint64_t param_id, std::string role, torch::Tensor tensor) {
  entries_.push_back({param_id, std::move(role), std::move(tensor)});
  sorted_.clear();
}

void DecodedTensors::Append(DecodedTensors&& other) {
  entries_.reserve(entries_.size() + other.entries_.size());
  for (Entry& entry : other.entries_) entries_.push_back(std::move(entry));
  other.entries_.clear();
  other.sorted_.clear();
  other.next_ = 0;
  sorted_.clear();
}

bool DecodedTensors::Matches(const Entry& entry, uint64_t param_id, std::string_view role_prefix,
                             std::string_view role) {
  const std::string_view have = entry.role;
  return entry.param_id == param_id && have.size() == role_prefix.size() + role.size() &&
         have.substr(0, role_prefix.size()) == role_prefix && have.substr(role_prefix.size()) == role;
}

torch::Tensor* DecodedTensors::Find(uint64_t param_id, std::string_view role_prefix, std::string_view role) {
  if (next_ < entries_.size() && Matches(entries_[next_], param_id, role_prefix, role)) {
    return &entries_[next_++].tensor;
  }
  return FindSorted(param_id, role_prefix, role);
}

torch::Tensor* DecodedTensors::FindSorted(uint64_t param_id, std::string_view role_prefix, std::string_view role) {
  auto key = [this](size_t i) { return std::tie(entries_[i].param_id, entries_[i].role); };
  if (sorted_.size() != entries_.size()) {
    sorted_.resize(entries_.size());
    for (size_t i = 0; i < sorted_.size(); ++i) sorted_[i] = i;
    std::sort(sorted_.begin(), sorted_.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  }
  const std::string full = std::string(role_prefix).append(role);
  auto at = std::lower_bound(sorted_.begin(), sorted_.end(), std::tie(param_id, full),
                             [&](size_t i, const auto& wanted) { return key(i) < wanted; });
  if (at == sorted_.end() || !Matches(entries_[*at], param_id, role_prefix, role)) return nullptr;
  next_ = *at + 1;  // the lookups after a miss usually go on in order from here
  return &entries_[*at].tensor;
}

}  // namespace trainsnap::internal
