// A partial restore (RestoreOptions::partial): the snapshot narrowed to what
// the target holds, before the restore validates and decodes it, so that the
// parts the target leaves out are neither checked nor read.
#pragma once

#include <google/protobuf/arena.h>

#include <vector>

#include "manifest.pb.h"
#include "torch/contract.h"
#include "trainsnap/status.h"
#include "trainsnap/training_state.h"

namespace trainsnap::internal {

// `manifest` without the models (their parameters, buffers, frozen
// parameters), optimizers, scheduler, accumulation window and extra states
// that `target` leaves out; `models` and `optimizers` are the target's
// (CollectModels, CollectOptimizers). The RNG stays: the target's `rng` says
// whether it is restored. What the target holds and the snapshot lacks is
// left for the restore's checks to name. InvalidArgument for a target that
// holds nothing (no model, optimizer, scheduler, window, extra or RNG): a
// restore of nothing is a caller's mistake. NotSupported when a left-out model
// has frozen parameters that the snapshot's base content hash covers (the
// hash covers the whole base: the models given cannot be checked without
// it). The result lives in `arena`.
Result<const proto::TrainingManifest*> SelectTarget(const proto::TrainingManifest& manifest,
                                                    const std::vector<NamedModel>& models,
                                                    const std::vector<NamedOptimizer>& optimizers,
                                                    const TrainingState& target, google::protobuf::Arena* arena);

}  // namespace trainsnap::internal
