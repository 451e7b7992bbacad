#include "capture/staged_keys.h"

namespace trainsnap::internal {

void StagedKeys::Reserve(size_t n) {
  size_t slots = 16;
  while (slots < 2 * n) slots *= 2;
  if (slots > slots_.size()) Grow(slots);
}

bool StagedKeys::Insert(uint64_t param_id, std::string_view role) {
  if (2 * (size_ + 1) > slots_.size()) Grow(slots_.empty() ? 16 : 2 * slots_.size());
  const uint32_t index = roles_.Of(role);
  const size_t mask = slots_.size() - 1;
  for (size_t at = Home(param_id, index, mask);; at = (at + 1) & mask) {
    Slot& slot = slots_[at];
    if (slot.role == kEmpty) {
      slot = {param_id, index};
      ++size_;
      return true;
    }
    if (slot.param_id == param_id && slot.role == index) return false;
  }
}

void StagedKeys::Clear() {
  for (Slot& slot : slots_) slot = Slot();
  size_ = 0;
}

size_t StagedKeys::Home(uint64_t param_id, uint32_t role, size_t mask) {
  // A multiplicative mix: IDs of hand-made tests (1, 2, 3...) spread too.
  const uint64_t mixed = (param_id ^ (uint64_t{role} << 56)) * 0x9E3779B97F4A7C15ull;
  return static_cast<size_t>(mixed >> 32) & mask;
}

void StagedKeys::Grow(size_t slots) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(slots, Slot());
  const size_t mask = slots - 1;
  for (const Slot& slot : old) {
    if (slot.role == kEmpty) continue;
    size_t at = Home(slot.param_id, slot.role, mask);
    while (slots_[at].role != kEmpty) at = (at + 1) & mask;
    slots_[at] = slot;
  }
}

}  // namespace trainsnap::internal
