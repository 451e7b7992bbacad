#include "capture/pipeline.h"

#include <algorithm>
#include <string>
#include <thread>
#include <utility>

#include <boost/asio/post.hpp>

#include "capture/device_readback.h"
#include "capture/encode.h"
#include "common/thread_priority.h"
#include "torch/exception_boundary.h"

namespace trainsnap::internal {

namespace {

Mutex encode_delay_mu;
std::function<std::chrono::milliseconds(int64_t)> encode_delay GUARDED_BY(encode_delay_mu);

size_t ThreadCount(int threads) {
  return threads > 0 ? static_cast<size_t>(threads) : std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

Status CaptureState::Wait() {
  MutexLock lock(&mu_);
  while (!done_) lock.Wait(cv_);
  return status_;
}

bool CaptureState::Ready() {
  MutexLock lock(&mu_);
  return done_;
}

void CaptureState::Finish(Status status) {
  MutexLock lock(&mu_);
  status_ = std::move(status);
  done_ = true;
  cv_.notify_all();
}

void CapturePipeline::SetEncodeDelayForTesting(std::function<std::chrono::milliseconds(int64_t step)> delay) {
  MutexLock lock(&encode_delay_mu);
  encode_delay = std::move(delay);
}

CapturePipeline::CapturePipeline(Store& store, int threads, size_t max_staging_bytes, int max_in_flight)
    : store_(store),
      staging_pool_(StagingPool::Create(max_staging_bytes)),
      pool_(std::make_unique<boost::asio::thread_pool>(ThreadCount(threads))),
      copy_pool_(std::make_unique<boost::asio::thread_pool>(ThreadCount(threads))),
      commit_strand_(boost::asio::make_strand(pool_->get_executor())),
      max_in_flight_(max_in_flight > 0 ? static_cast<size_t>(max_in_flight) : 0) {
  // Best effort: the store's open already lowered its own workers the same
  // way, so this cannot fail for want of permission.
  Status lowered = LowerPoolPriority(*pool_, ThreadCount(threads), store.options().worker_nice);
  (void)lowered;
}

CapturePipeline::~CapturePipeline() {
  Status ignored = Flush();  // errors were reported through the handles
  (void)ignored;
  pool_->join();
  copy_pool_->join();
}

Status CapturePipeline::Admit(int64_t step) {
  MutexLock lock(&mu_);
  if (steps_in_flight_.count(step)) return Status::AlreadyExists("already in flight");
  if (max_in_flight_ == 0 || in_flight_ < max_in_flight_) return Status::OK();
  ++admit_waits_;
  while (in_flight_ >= max_in_flight_) lock.Wait(idle_);
  return Status::OK();
}

Result<bool> CapturePipeline::TryAdmit(int64_t step) {
  MutexLock lock(&mu_);
  if (steps_in_flight_.count(step)) return Status::AlreadyExists("already in flight");
  return max_in_flight_ == 0 || in_flight_ < max_in_flight_;
}

std::shared_ptr<CaptureState> CapturePipeline::Skipped(int64_t step) {
  {
    MutexLock lock(&mu_);
    ++skipped_;
  }
  auto state = std::make_shared<CaptureState>(step, /*skipped=*/true);
  state->Finish(Status::OK());
  return state;
}

CapturePipeline::LagStats CapturePipeline::lag_stats() {
  MutexLock lock(&mu_);
  LagStats out;
  out.last_committed_step = last_committed_step_;
  out.in_flight = in_flight_;
  out.max_in_flight = max_in_flight_;
  out.admit_waits = admit_waits_;
  out.skipped = skipped_;
  if (last_committed_step_.has_value() && previous_committed_step_.has_value()) {
    out.steps_between_last_commits = *last_committed_step_ - *previous_committed_step_;
  }
  return out;
}

std::shared_ptr<CaptureState> CapturePipeline::Submit(std::unique_ptr<StagedSnapshot> staged,
                                                      std::vector<std::shared_ptr<c10::Event>> ready,
                                                      std::function<void(const Status&)> on_done) {
  auto job = std::make_shared<Job>();
  job->state = std::make_shared<CaptureState>(staged->step);
  job->staged = std::move(staged);
  job->ready = std::move(ready);
  job->on_done = std::move(on_done);
  job->pin = std::make_unique<StorePin>(&store_, "capture step " + std::to_string(job->staged->step));
  {
    MutexLock lock(&mu_);
    job->seq = next_seq_++;
    ++in_flight_;
    steps_in_flight_.insert(job->staged->step);
  }
  std::shared_ptr<CaptureState> state = job->state;
  boost::asio::post(*pool_, [this, job]() mutable {
    Encode(*job);
    EncodeDone(std::move(job));
  });
  return state;
}

std::shared_ptr<CaptureState> CapturePipeline::Failed(int64_t step, Status status) {
  auto state = std::make_shared<CaptureState>(step);
  {
    MutexLock lock(&mu_);
    if (first_error_.ok()) first_error_ = status;
  }
  state->Finish(std::move(status));
  return state;
}

void CapturePipeline::Encode(Job& job) {
  const int64_t step = job.staged->step;
  // Pool tasks must not throw.
  job.status = ExceptionBoundary([&]() -> Status {
    for (const std::shared_ptr<c10::Event>& event : job.ready) WaitForEvent(*event);
    job.ready.clear();
    std::chrono::milliseconds delay{0};
    {
      MutexLock lock(&encode_delay_mu);
      if (encode_delay) delay = encode_delay(step);
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    TRAINSNAP_ASSIGN_OR_RETURN(job.writer, store_.BeginSnapshot(step));
    return EncodeTensors(*job.staged, *job.writer);
  });
  // The host copies are encoded (or useless): back to the pool now, not at commit.
  job.staged->staging = StagingArea();
}

void CapturePipeline::EncodeDone(std::shared_ptr<Job> job) {
  MutexLock lock(&mu_);
  encoded_.emplace(job->seq, std::move(job));
  // Posting to the strand in sequence order makes the commits run in that order.
  for (auto it = encoded_.find(next_commit_); it != encoded_.end(); it = encoded_.find(next_commit_)) {
    boost::asio::post(commit_strand_, [this, next = std::move(it->second)] { Commit(*next); });
    encoded_.erase(it);
    ++next_commit_;
  }
}

void CapturePipeline::Commit(Job& job) {
  const int64_t step = job.staged->step;
  if (job.status.ok()) {
    job.status = ExceptionBoundary([&] { return CommitStaged(*job.staged, *job.writer).status(); });
  }
  job.writer.reset();  // an uncommitted writer abandons its snapshot
  job.pin.reset();     // the store is not used past this point
  job.status = job.status.WithContext("capture step " + std::to_string(step));
  if (job.on_done) job.on_done(job.status);
  Status status = job.status;
  job.staged.reset();
  {
    // Before the handle is ready: whoever waited on it sees the step in
    // lag_stats(), and a capture of the same step is then refused by the
    // store (stored), not as "already in flight".
    MutexLock lock(&mu_);
    if (status.ok()) {
      previous_committed_step_ = last_committed_step_;
      last_committed_step_ = step;
    }
    steps_in_flight_.erase(steps_in_flight_.find(step));
  }
  job.state->Finish(status);
  Done(status);
}

void CapturePipeline::Done(const Status& status) {
  MutexLock lock(&mu_);
  if (!status.ok() && first_error_.ok()) first_error_ = status;
  --in_flight_;
  idle_.notify_all();
}

void CapturePipeline::WaitIdle() {
  MutexLock lock(&mu_);
  while (in_flight_ != 0) lock.Wait(idle_);
}

Status CapturePipeline::Flush() {
  MutexLock lock(&mu_);
  while (in_flight_ != 0) lock.Wait(idle_);
  Status error = std::move(first_error_);
  first_error_ = Status::OK();
  return error;
}

}  // namespace trainsnap::internal
