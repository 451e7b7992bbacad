// A whole restore: manifest and format version, contract, frozen base,
// devices, composition, decode (hash-verified), and only then the copy into
// the live objects, so that every check that can fail runs before anything
// live is touched.
#pragma once

#include <cstdint>

#include "torch/base_identity.h"
#include "torch/contract_cache.h"
#include "trainsnap/checkpointer.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

// On error before the copy, every live object is unchanged. May throw
// c10::Error (the caller's ExceptionBoundary converts it). Chunks decode in parallel on the
// store's workers (see DecodeTensors). `contracts`: the target's contract
// comes from this cache (null: built for this restore alone).
Status RestoreSnapshot(Store& store, int64_t step, const TrainingState& target, const RestoreOptions& options,
                       const std::string& base_label, BaseIdentityBuilder& base, ContractCache* contracts = nullptr);

}  // namespace trainsnap::internal
