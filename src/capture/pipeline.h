// CapturePipeline: encodes and commits staged snapshots on its own
// boost::asio::thread_pool while training goes on.
//
// Each submitted snapshot is encoded by one pool task (wait for its device
// readback events, BeginSnapshot, AddTensor per tensor -- each itself
// parallel over chunks on the Store's pool, a different pool, so this cannot
// deadlock --, then its staging buffers are released). Commits run on one
// strand in submission order: snapshot k+1 never commits before k, whatever
// order the encodes finish in. A snapshot whose encode or commit fails
// reports it through its CaptureState and Flush; later ones still commit.
// At most max_in_flight submissions are in flight: Admit waits for a slot.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <c10/core/Event.h>

#include "capture/stage.h"
#include "capture/staging_pool.h"
#include "common/mutex.h"
#include "store/store_pin.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

// The outcome of one capture in flight; shared by its handle and the pipeline.
class CaptureState {
 public:
  // skipped: a capture the overhead budget left out (already finished, OK).
  explicit CaptureState(int64_t step, bool skipped = false) : step_(step), skipped_(skipped) {}
  int64_t step() const { return step_; }
  bool skipped() const { return skipped_; }
  Status Wait() EXCLUDES(mu_);
  bool Ready() EXCLUDES(mu_);
  void Finish(Status status) EXCLUDES(mu_);

 private:
  const int64_t step_;
  const bool skipped_;
  Mutex mu_;
  std::condition_variable cv_;  // done_ became true
  bool done_ GUARDED_BY(mu_) = false;
  Status status_ GUARDED_BY(mu_);
};

class CapturePipeline {
 public:
  // threads 0 = hardware threads; max_staging_bytes 0 = 1 GiB; max_in_flight
  // 0 = no bound in submissions.
  CapturePipeline(Store& store, int threads, size_t max_staging_bytes, int max_in_flight);
  ~CapturePipeline();  // Flush()es, then joins the pool

  const std::shared_ptr<StagingPool>& staging_pool() const { return staging_pool_; }
  boost::asio::thread_pool& pool() { return *pool_; }
  // For the staging memcpy of large CPU tensors: separate from pool(), whose
  // threads may all be busy encoding earlier snapshots.
  boost::asio::thread_pool& copy_pool() { return *copy_pool_; }

  // Called by the one submitting thread before it stages `step`:
  // AlreadyExists when a submission of `step` is in flight; otherwise waits
  // until fewer than max_in_flight submissions are (back-pressure).
  Status Admit(int64_t step) EXCLUDES(mu_);
  // Admit without the wait: false when max_in_flight submissions are in
  // flight (not counted in admit_waits); AlreadyExists as Admit.
  Result<bool> TryAdmit(int64_t step) EXCLUDES(mu_);
  // A capture of `step` that the overhead budget skipped: a finished, OK
  // state whose skipped() is true, counted in lag_stats().
  std::shared_ptr<CaptureState> Skipped(int64_t step) EXCLUDES(mu_);
  // Encodes `staged` once every event in `ready` completed, then commits it
  // after every earlier submission. `on_done` runs on the commit strand with
  // the final status before the handle becomes ready.
  std::shared_ptr<CaptureState> Submit(std::unique_ptr<StagedSnapshot> staged,
                                       std::vector<std::shared_ptr<c10::Event>> ready,
                                       std::function<void(const Status&)> on_done);
  // A capture that failed before Submit (staging) still counts in Flush.
  std::shared_ptr<CaptureState> Failed(int64_t step, Status status) EXCLUDES(mu_);
  // Waits for every submission; returns the first error since the last Flush.
  Status Flush() EXCLUDES(mu_);
  // Waits for every submission; keeps the errors for the next Flush.
  void WaitIdle() EXCLUDES(mu_);

  struct LagStats {
    std::optional<int64_t> last_committed_step;
    size_t in_flight = 0;
    size_t max_in_flight = 0;  // 0 = no bound
    uint64_t admit_waits = 0;  // Admit calls that waited for a slot
    uint64_t skipped = 0;      // Skipped calls
    // last_committed_step minus the step committed before it; nullopt
    // before the second commit.
    std::optional<int64_t> steps_between_last_commits;
  };
  LagStats lag_stats() EXCLUDES(mu_);

  // Test hook: every encode of step s first sleeps delay(s) (a deliberately
  // slow encoder; encodes finishing out of order). Empty = no delay.
  static void SetEncodeDelayForTesting(std::function<std::chrono::milliseconds(int64_t step)> delay);

 private:
  struct Job {
    uint64_t seq = 0;
    std::unique_ptr<StagedSnapshot> staged;
    std::vector<std::shared_ptr<c10::Event>> ready;
    std::function<void(const Status&)> on_done;
    std::shared_ptr<CaptureState> state;
    std::unique_ptr<SnapshotWriter> writer;
    Status status;
    // Held from Submit until the last use of the store (see store_pin.h).
    std::unique_ptr<StorePin> pin;
  };
  void Encode(Job& job) EXCLUDES(mu_);
  void EncodeDone(std::shared_ptr<Job> job) EXCLUDES(mu_);
  void Commit(Job& job) EXCLUDES(mu_);
  void Done(const Status& status) EXCLUDES(mu_);

  Store& store_;
  std::shared_ptr<StagingPool> staging_pool_;
  std::unique_ptr<boost::asio::thread_pool> pool_;
  std::unique_ptr<boost::asio::thread_pool> copy_pool_;
  boost::asio::strand<boost::asio::thread_pool::executor_type> commit_strand_;

  // A leaf lock: nothing else is locked while it is held (docs/code-map.md).
  Mutex mu_;
  std::condition_variable idle_;  // in_flight_ went down
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
  uint64_t next_commit_ GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::shared_ptr<Job>> encoded_ GUARDED_BY(mu_);  // waiting for their turn to commit
  size_t in_flight_ GUARDED_BY(mu_) = 0;
  std::multiset<int64_t> steps_in_flight_ GUARDED_BY(mu_);
  const size_t max_in_flight_;
  uint64_t admit_waits_ GUARDED_BY(mu_) = 0;
  uint64_t skipped_ GUARDED_BY(mu_) = 0;
  std::optional<int64_t> last_committed_step_ GUARDED_BY(mu_);
  std::optional<int64_t> previous_committed_step_ GUARDED_BY(mu_);  // committed before last_committed_step_
  Status first_error_ GUARDED_BY(mu_);
};

}  // namespace trainsnap::internal
