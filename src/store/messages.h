// How the store's messages name what they are about: steps and reads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "store/keys.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

inline std::string StepName(int64_t step) { return "step " + std::to_string(step); }

inline std::string OptionalStep(const std::optional<int64_t>& step) { return step ? StepName(*step) : "no snapshot"; }

// How errors name a TensorRead (built only when one is reported).
inline std::string ReadName(const TensorRead& read) {
  if (!read.name.empty()) return read.name;
  return "read tensor param_id " + ParamIdHex(read.record->param_id) + " role " + read.record->role;
}

}  // namespace trainsnap::internal
