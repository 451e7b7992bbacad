// ReplicaPlacement: which rank stores each replicated tensor of a capture
// (written once in all, balanced by bytes: docs/distributed.md, "Who writes
// what"), and, for the replica check, the XXH3 of every replicated tensor,
// computed on a pool of its own (hash_threads threads, started with it)
// while the capture stages.
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

// XXH3-64 of `size` bytes hashed in pieces of kReplicaHashPiece (each
// piece's XXH3-64, then the XXH3-64 of those, seeded with `size`), so that a
// large tensor hashes on several threads. Equal bytes, equal hash.
inline constexpr size_t kReplicaHashPiece = size_t{1} << 20;
uint64_t PieceHash(const void* data, size_t size);
uint64_t CombinePieceHashes(const std::vector<uint64_t>& pieces, uint64_t size);

// What the placement decided for one capture.
struct Placed {
  int64_t step = 0;
  // (name, role, bytes) of every replicated tensor, in candidate order: equal
  // on every rank that holds the same replicated state.
  uint64_t fingerprint = 0;
  uint64_t owned_bytes = 0;  // replicated bytes this rank stores
  // With the replica check: "`name` role R" and the hash of each replicated
  // tensor (PieceHash over its bytes), in candidate order.
  std::vector<std::string> names;
  std::vector<uint64_t> hashes;
};

// Replicated tensors are the model's (roles "param", "buffer") when
// `model_replicated`, the optimizer's otherwise-named roles when
// `optimizer_replicated`. Every rank computes the same owners from the same
// candidates; rank-local tensors stay with their rank. One capture at a time
// (the training thread): Place, then Take before the caller may change a
// tensor.
class ReplicaPlacement final : public TensorPlacement {
 public:
  ReplicaPlacement(bool model_replicated, bool optimizer_replicated, bool verify, int rank, int ranks,
                   int hash_threads);
  ~ReplicaPlacement() override;  // waits for the hashing in flight

  static bool IsReplicatedRole(const std::string& role, bool model_replicated, bool optimizer_replicated);

  // With the replica check, starts hashing every replicated tensor on the
  // pool, reading the live tensors while the Checkpointer stages.
  Result<std::vector<std::string>> Place(int64_t step, const std::vector<PlacementCandidate>& candidates) override;
  // The decision of the last Place for `step`, once its hashes are done
  // (waits for them); nullopt when Place did not run for `step`. An
  // exception while hashing (a device copy) is Aborted.
  Result<std::optional<Placed>> Take(int64_t step);

 private:
  class Hashing;
  const bool model_replicated_;
  const bool optimizer_replicated_;
  const bool verify_;
  const int rank_;
  const int ranks_;
  const int hash_threads_;
  std::unique_ptr<boost::asio::thread_pool> pool_;  // the replica check's hashing threads
  std::optional<Placed> placed_;                    // training thread only
  std::unique_ptr<Hashing> hashing_;                // the hashes of placed_, in flight
};

}  // namespace trainsnap::internal
