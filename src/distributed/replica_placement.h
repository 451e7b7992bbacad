// ReplicaPlacement: which rank stores each replicated tensor of a capture
// (written once in all, balanced by bytes: docs/distributed.md, "Who writes
// what"), and, for the replica check, the XXH3 of a sample of every
// replicated tensor's bytes (the blocks SampleStride and SampleOffset pick: the same on every
// rank), computed on a pool of its own (hash_threads threads, started with
// it) while the capture stages.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainsnap/checkpointer.h"
#include "trainsnap/status.h"

namespace boost::asio {
class thread_pool;
}  // namespace boost::asio

namespace trainsnap::internal {

// Owners, greedily, largest first (ties keep the input order), each to the
// rank with the fewest bytes so far (ties: the lowest rank): rank of each
// entry of `bytes`.
std::vector<int> AssignOwners(const std::vector<uint64_t>& bytes, int ranks);

// The replica check's sample. The replicated tensors' bytes are cut into
// blocks of kReplicaHashBlock (a tensor's last one may be shorter; a tensor
// smaller than a block is one block), numbered across the tensors in
// candidate order; the capture of `step` hashes block b when
// b % stride == SampleOffset(step, stride), where stride =
// SampleStride(replicated bytes in all, DistributedOptions::replica_check_stride):
// one block in `stride`, so that the training thread's wait for the hashes
// stays a small part of its stall, and every block once in `stride`
// captures on average (the offset is drawn from the step, which every rank
// knows). The stride is at most bytes / kReplicaMinSampleBytes, so that a
// capture hashes that many bytes on average: a state under twice that is
// hashed whole at every capture. Blocks of 1 MiB, not smaller: XXH3 reads a
// sample of scattered 64 KiB blocks at a quarter of the speed of the same
// bytes in 1 MiB blocks (bench/README.md, "Replica check by sample").
inline constexpr size_t kReplicaHashBlock = size_t{1} << 20;
inline constexpr uint64_t kReplicaMinSampleBytes = kReplicaHashBlock;  // one block a capture
uint64_t SampleStride(uint64_t bytes, int replica_check_stride);
// A sample of fewer bytes is hashed by the thread that takes the hashes,
// after the staging copies; a larger one on the pool, side by side with them.
inline constexpr uint64_t kReplicaParallelHashBytes = uint64_t{4} << 20;
uint64_t SampleOffset(int64_t step, uint64_t stride);

// A tensor's hash: the XXH3-64 of its sampled blocks' XXH3-64s (in block
// order), seeded with its size in bytes. Equal bytes, equal hash; a tensor
// with no sampled block hashes its size alone.
uint64_t BlockHash(const void* data, size_t size);
uint64_t CombineBlockHashes(const std::vector<uint64_t>& blocks, uint64_t size);

// What the placement decided for one capture.
struct Placed {
  int64_t step = 0;
  // (name, role, bytes) of every replicated tensor, in candidate order: equal
  // on every rank that holds the same replicated state.
  uint64_t fingerprint = 0;
  uint64_t owned_bytes = 0;  // replicated bytes this rank stores
  // With the replica check: "`name` role R" and the hash of each replicated
  // tensor (CombineBlockHashes over its sampled blocks), in candidate order;
  // how many bytes were hashed.
  std::vector<std::string> names;
  std::vector<uint64_t> hashes;
  uint64_t hashed_bytes = 0;
};

// Replicated tensors are the model's (roles "param", "buffer") when
// `model_replicated`, the optimizer's otherwise-named roles when
// `optimizer_replicated`. Every rank computes the same owners from the same
// candidates; rank-local tensors stay with their rank. One capture at a time
// (the training thread): Place, then Take before the caller may change a
// tensor.
class ReplicaPlacement final : public TensorPlacement {
 public:
  // verify: the replica check, sampling one block in `check_stride` (>= 1).
  ReplicaPlacement(bool model_replicated, bool optimizer_replicated, bool verify, int rank, int ranks, int hash_threads,
                   int check_stride = 1);
  ~ReplicaPlacement() override;  // waits for the hashing in flight

  static bool IsReplicatedRole(const std::string& role, bool model_replicated, bool optimizer_replicated);

  // With the replica check, starts hashing the sample of every replicated
  // tensor on the pool, reading the live tensors while the Checkpointer
  // stages.
  Result<std::vector<std::string>> Place(int64_t step, const std::vector<PlacementCandidate>& candidates) override;
  // The decision of the last Place for `step`, once its hashes are done
  // (waits for them); nullopt when Place did not run for `step`. An
  // exception while hashing (a device copy) is Aborted.
  Result<std::optional<Placed>> Take(int64_t step);

 private:
  class Hashing;
  void WaitForHashing();  // the hashing in flight, its result dropped
  const bool model_replicated_;
  const bool optimizer_replicated_;
  const bool verify_;
  const int rank_;
  const int ranks_;
  const int hash_threads_;
  const int check_stride_;
  std::unique_ptr<boost::asio::thread_pool> pool_;  // the replica check's hashing threads
  std::optional<Placed> placed_;                    // training thread only
  std::shared_ptr<Hashing> hashing_;                // the hashes of placed_, in flight (shared with the pool's workers)
};

}  // namespace trainsnap::internal
