// RankGroup: the checkpointer's private Gloo process group, and the one
// collective it runs: every rank contributes a report (a Status and a few
// integers) and receives every rank's. Every call has the group's timeout:
// a dead or stuck rank makes it fail with Aborted, never hang.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "trainsnap/status.h"

namespace trainsnap::internal {

// One rank's contribution to an agreement. The message is cut to
// kReportMessageBytes on the wire.
struct RankReport {
  Status status;
  std::array<int64_t, 8> values{};
};
inline constexpr size_t kReportMessageBytes = 4000;

// Status of the lowest rank that failed, prefixed "rank R: "; OK when none did.
Status FirstFailure(const std::vector<RankReport>& reports);

// Not thread-safe: one caller at a time (DistributedState calls it from its
// committer thread, or from the training thread once the committer is idle).
class RankGroup {
 public:
  // Collective over `user_group` (one broadcast of a nonce from rank 0, on a
  // CPU tensor), then a rendezvous through <run_dir>/.c10d-<nonce>, which rank
  // 0 deletes with the files of earlier runs. The Gloo devices are those of
  // `user_group` when it is a ProcessGroupGloo, else Gloo's default device.
  static Result<std::unique_ptr<RankGroup>> Create(const std::string& run_dir,
                                                   const c10::intrusive_ptr<c10d::ProcessGroup>& user_group,
                                                   std::chrono::milliseconds timeout);
  ~RankGroup();

  int rank() const { return rank_; }
  bool broken() const { return !broken_.ok(); }
  int size() const { return size_; }
  // Every rank's report, by rank. Aborted (naming `what`) when the collective
  // fails; the group is broken from then on and every later call fails with
  // the same status.
  Result<std::vector<RankReport>> Agree(const RankReport& mine, const std::string& what);
  // Every rank's `mine` (any length), by rank. Failures as Agree's.
  Result<std::vector<std::string>> AllGather(const std::string& mine, const std::string& what);
  // Every rank's `mine` (a contiguous CPU byte tensor of any length, or an
  // undefined tensor for none), by rank: the lengths are agreed first, then
  // each rank's bytes are broadcast from it (unequal lengths cost no
  // padding). The result holds `mine` itself at this rank's index.
  // Failures as Agree's.
  Result<std::vector<at::Tensor>> Exchange(const at::Tensor& mine, const std::string& what);

 private:
  RankGroup(c10::intrusive_ptr<c10d::ProcessGroup> group, int rank, int size, std::chrono::milliseconds timeout);

  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  Status broken_;
};

}  // namespace trainsnap::internal
