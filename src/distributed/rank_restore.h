// The parts of a restore on several ranks that depend on the step's world
// size and not on the collectives (docs/distributed.md, "Restore across
// ranks"): which rank stores a rank reads, the replicated tensors it packs
// for the others, the manifest it restores (its home rank's, with the RNG of
// a rank that did not exist derived), and the reader that decodes from the
// exchanged tensors and the stores.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "manifest.pb.h"
#include "restore/decode.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

using TensorKey = std::pair<uint64_t, std::string>;  // (param_id, role)

// The rank whose snapshot rank `rank` restores when `captured` ranks took the
// step: itself, or (a rank that did not exist) rank % captured.
int HomeRank(int rank, int captured);
// The rank stores rank `rank` of `ranks` reads at a restore of a step
// `captured` ranks took: every k < captured with k % ranks == rank, so that
// each store is read by one rank.
std::vector<int> StoresReadBy(int rank, int ranks, int captured);

// Every replicated tensor of a step and the rank store that holds it, from
// one rank's manifest of the step (`home`: that rank, whose store holds the
// replicated tensors the manifest does not list as external), split into the
// model's (roles "param", "buffer") and the optimizer's. By store rank,
// keys sorted.
struct ReplicatedTensors {
  std::map<int, std::vector<TensorKey>> model;
  std::map<int, std::vector<TensorKey>> optimizer;
};
Result<ReplicatedTensors> ReplicatedHolders(const proto::TrainingManifest& manifest, int home, bool model_replicated,
                                            bool optimizer_replicated);

// Decodes `keys` of snapshot `step` from each store (hash-verified) into one
// byte tensor that also names them: what a rank sends the others. Undefined
// when there are none. Corruption when a store lacks one.
Result<torch::Tensor> PackTensors(int64_t step, const std::vector<std::pair<Store*, std::vector<TensorKey>>>& reads);
// The tensors of packed bytes, each a view into them. Corruption for bytes
// that do not parse.
Result<std::map<TensorKey, torch::Tensor>> UnpackTensors(const torch::Tensor& packed);

// The seed of a default generator on a rank that did not exist at capture:
// XXH3-64 of the state its home rank saved for that generator, seeded with
// the rank.
uint64_t DerivedSeed(const std::string& saved_state, int rank);
// Replaces every generator state of `manifest` by that of the same kind of
// generator seeded DerivedSeed(state, rank) (Generator::set_current_seed).
// A generator of a device this process lacks is left as it is (the restore
// then names it).
Status DeriveRng(proto::TrainingManifest* manifest, int rank);

// Reads the wanted tensors of a restore on several ranks: the replicated
// ones from `exchanged` (the tensors every rank sent), the manifest's other
// external tensors from the store `source` names, the rest from `home`.
class RankTensorReader final : public TensorReader {
 public:
  using SourceFn = std::function<Result<Store*>(const std::string& source)>;
  RankTensorReader(Store& home, SourceFn source, const std::map<TensorKey, torch::Tensor>& exchanged)
      : home_(home), source_(std::move(source)), exchanged_(exchanged) {}
  Result<DecodedTensors> Read(int64_t step, const proto::TrainingManifest& manifest,
                              const std::vector<WantedTensor>& wanted) override;

 private:
  Store& home_;
  SourceFn source_;
  const std::map<TensorKey, torch::Tensor>& exchanged_;
};

}  // namespace trainsnap::internal
