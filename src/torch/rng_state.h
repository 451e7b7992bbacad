// Capture and restore of torch's default random generators: the CPU
// generator and, when CUDA is available, one generator per CUDA device.
#pragma once

#include <vector>

#include <ATen/core/Generator.h>

#include "manifest.pb.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

// Appends the state of every default generator to `out`.
Status CaptureRng(google::protobuf::RepeatedPtrField<proto::GeneratorState>* out);

// A validated set of generator states, ready to be applied.
struct PreparedRng {
  std::vector<std::pair<at::Generator, at::Tensor>> states;
};

// Checks every state against this process's generators (device present,
// state accepted by a scratch generator of the same kind) without touching
// them. ContractMismatch for an absent device; Corruption for a bad state.
Result<PreparedRng> PrepareRng(const google::protobuf::RepeatedPtrField<proto::GeneratorState>& states);
// Sets the generators. Cannot fail after PrepareRng succeeded.
void ApplyRng(PreparedRng& prepared);

}  // namespace trainsnap::internal
