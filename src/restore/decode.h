// Decode: read the tensors a restore needs from the store into fresh host
// staging tensors, verifying every chunk hash. Touches no live object.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "manifest.pb.h"
#include "restore/decoded_tensors.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

// A tensor the manifest says the snapshot holds, with what it must look like.
// `name` and `shape` point into the manifest or the target's contract, which
// must outlive the decode: a restore wants every tensor of the snapshot, and
// copies of them cost two allocations per tensor (to scale linearly with the parameter count).
struct WantedTensor {
  uint64_t param_id = 0;
  std::string role;
  const std::string* name = nullptr;  // qualified name, for error messages; not null
  c10::IntArrayRef shape;             // expected shape
  std::optional<DType> dtype;         // expected dtype, when the manifest fixes it
};

// Reads every wanted tensor of snapshot `step`, into `wanted` order. Corruption when one is
// missing, disagrees with its expected shape/dtype, or fails a chunk hash
// (the message names the tensor and role). All chunks are read in one
// Store::ReadTensors (batched MultiGets, decoded in parallel on the store's
// workers); the error reported is the first in `wanted` order. (When that
// read fails, the reads are repeated one at a time, in order, to name the
// first that fails: naming every read up front cost a string per tensor.)
Result<DecodedTensors> DecodeTensors(Store& store, int64_t step, const std::vector<WantedTensor>& wanted);

// Where the decode phase gets its tensors from: one store and the sources of
// external tensors by default; a multi-process restore reads some of them
// from other processes.
class TensorReader {
 public:
  virtual ~TensorReader() = default;
  // Every wanted tensor of snapshot `step` (described by `manifest`), in
  // `wanted` order, with DecodeTensors' checks and errors.
  virtual Result<DecodedTensors> Read(int64_t step, const proto::TrainingManifest& manifest,
                                      const std::vector<WantedTensor>& wanted) = 0;
};

}  // namespace trainsnap::internal
