// DistributedCheckpointer: one snapshot across every rank of a multi-process
// training run, coordinated through LibTorch's c10d and committed globally.
// Run-directory layout and the commit protocol: docs/distributed.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "trainsnap/checkpointer.h"
#include "trainsnap/export.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap {

struct TRAINSNAP_EXPORT DistributedOptions {
  // Options of every rank's Checkpointer on its own store.
  CheckpointerOptions checkpointer;
  // Options of every rank's store (rank-NNNNN/). store.retention is applied
  // to GLOBAL steps after each global commit (global record first, then every
  // rank's snapshot), never by a rank's store on its own.
  StoreOptions store;
  // Every rank holds the same model (parameters and buffers): each such
  // tensor is written by one rank only, the ranks' shares balanced by bytes
  // (docs/distributed.md, "Who writes what"), and read by every rank at
  // restore from the store that holds it. The ranks must hold the same names,
  // roles and sizes (InvalidArgument at capture otherwise).
  bool model_replicated = true;
  // true: every rank's optimizer holds the same state, written once in all
  // as the model is. false: each rank's optimizer holds its own shard
  // (ZeRO-1; rank-local state, in that rank's store), found by parameter at a
  // restore on another world size. A step restores only with the layout it
  // was captured with (ContractMismatch).
  bool optimizer_replicated = true;
  // At every capture, the ranks compare the XXH3 of a sample of every
  // replicated tensor's bytes (hashed on a pool of CheckpointerOptions::threads
  // threads, else StoreOptions::threads, else up to 8, while the capture
  // stages; compared by the committers); a divergence fails the step on
  // every rank with InvalidArgument naming the first differing tensor (by
  // name, then role) and the ranks whose bytes differ from rank 0's. Every
  // rank must set the same value (InvalidArgument otherwise).
  bool verify_replicas = true;
  // The sample: one 1 MiB block in replica_check_stride of the replicated
  // bytes (a tensor under 1 MiB is one block), but at least 1 MiB a capture
  // on average (a state under 2 MiB: all of it), a different one at each
  // step, so that the check adds a few percent to the stall. A drift that
  // touches every block (a gradient averaged differently) fails the first
  // capture after it; one confined to a block is found within `stride`
  // captures on average. 1: every byte at every capture (on 2 cores a stall
  // up to 2x longer). At least 1 (InvalidArgument at Open); every rank must
  // set the same value.
  int replica_check_stride = 32;
  // A restore on another world size of a step in the middle of an
  // accumulation window: false (default) refuses it (NotSupported naming the
  // nearest global step at a window boundary); true restarts the window
  // (micro-step 0, weight sum 0, pending gradients restored as zeros: the
  // micro-batches of the window are not trained on). Pending gradients
  // belong to the ranks that computed them and cannot be redistributed.
  bool restart_window = false;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // any collective: a dead rank is an error, never a hang
};

namespace internal {
class DistributedState;
}  // namespace internal

// One per rank; every rank of `group` calls each collective method in the
// same order with the same step (a mismatch is InvalidArgument on every
// rank). The group must run collectives on CPU tensors (Gloo); the
// checkpointer's own collectives use a private Gloo group (rendezvous
// through a file in run_dir, which every rank must see), so that its
// background commits never interleave with the trainer's collectives.
// Thread-compatible: one training thread per rank drives it. After a failed
// collective (a dead rank, a timeout) every later call returns that error:
// restart the ranks and Open again. A step captured (or rolled back to) at N
// ranks restores at M ranks: replicated state read from whichever stores
// hold it, a sharded optimizer's state found by parameter, rank-local state
// (gradients, RNG, extras) from rank r % N, with the RNG of a rank r >= N
// derived (docs/distributed.md, "Restore on another world size").
class TRAINSNAP_EXPORT DistributedCheckpointer {
 public:
  // Every rank calls it with the same run_dir; rank r keeps its own store
  // inside it. Collective. Local snapshots of steps that never became global
  // (a crash between the local and the global commit) are deleted here.
  static Result<std::unique_ptr<DistributedCheckpointer>> Open(
      const std::string& run_dir, c10::intrusive_ptr<c10d::ProcessGroup> group, DistributedOptions options = {});
  ~DistributedCheckpointer();  // waits for the captures in flight (Flush)
  DistributedCheckpointer(const DistributedCheckpointer&) = delete;
  DistributedCheckpointer& operator=(const DistributedCheckpointer&) = delete;

  // Waits for the previous capture's global outcome, then stages `state` on
  // this rank (as Checkpointer::CaptureAsync) and returns; the handle
  // completes once the step committed GLOBALLY (or failed on every rank with
  // the same error: the lowest failing rank's, prefixed "rank R: "). A
  // staging error is returned here as well. Once a global step failed, every
  // CaptureAsync returns that error, on every rank, until Flush reports it:
  // a loop that stops on an error stops at the next step on every rank.
  Result<CaptureHandle> CaptureAsync(int64_t step,
                                     const TrainingState& state);  // collective
  // CaptureAsync and the handle's Wait; its error is reported here, so the
  // next capture does not return it again.
  Status Capture(int64_t step, const TrainingState& state);  // collective
  // Waits for every capture in flight; the first error since the last Flush.
  Status Flush();
  // Validates and decodes on every rank (and loads the extras), then applies
  // on every rank only if all succeeded; otherwise every rank returns the
  // same error and every live object is unchanged. NotFound: `step` is not a
  // global step; ContractMismatch: another optimizer layout
  // (DistributedOptions::optimizer_replicated) than at capture, or another
  // world size with model_replicated = false; NotSupported: another world
  // size mid-window (DistributedOptions::restart_window). Restoring an older
  // step keeps the later ones: capturing them again is AlreadyExists (use
  // RollbackTo).
  Status Restore(int64_t step, const TrainingState& target);  // collective
  // Restore(step, target), and once every rank validated and decoded, the
  // deletion of every later step: the global records first (one
  // transaction on rank 0), then every rank store's snapshots of them. After
  // it the following steps may be captured again. Collective.
  Status RollbackTo(int64_t step, const TrainingState& target);
  Result<int64_t> RestoreLatest(const TrainingState& target); // the latest GLOBALLY committed step; returns it
  Result<std::vector<int64_t>> Steps();                       // globally committed steps, ascending

  int rank() const;
  int world_size() const;

 private:
  explicit DistributedCheckpointer(std::unique_ptr<internal::DistributedState> state);
  std::unique_ptr<internal::DistributedState> state_;
};

}  // namespace trainsnap
