// Validation, the first phase of a restore: everything that can be checked
// against the manifest and the target before a byte is decoded. Touches no
// live object.
#pragma once

#include <string>

#include "torch/base_identity.h"
#include "torch/contract.h"
#include "manifest.pb.h"
#include "trainsnap/checkpointer.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

// The trainable-parameter contract (IDs, names, tying, shapes, dtypes) and
// the stored buffers/frozen tensors against the target. ContractMismatch
// naming the first mismatch: "parameter `x`: expected shape [4, 8], actual [4, 9]".
Status CheckContract(const proto::TrainingManifest& manifest, const Contract& target);

// The frozen base against the target's frozen parameters and label.
// ContractMismatch on any difference.
Status CheckBaseIdentity(const proto::BaseIdentity& base, const Contract& target, const std::string& label,
                         BaseIdentityBuilder& builder);

// Every target tensor must live on a device restore can copy to (CPU, CUDA).
Status CheckDevices(const Contract& target);

// The rest of the training state: optimizers (names, types, groups),
// scheduler, accumulation window, extra state and RNG must be present on
// both sides or on neither. ContractMismatch otherwise.
Status CheckComposition(const proto::TrainingManifest& manifest, const TrainingState& target,
                        const std::vector<NamedOptimizer>& optimizers, const Contract& contract);

}  // namespace trainsnap::internal
