#include "trainsnap/checkpointer.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "capture/pipeline.h"
#include "capture/stage.h"
#include "capture/stage_estimate.h"
#include "capture/staging_scope.h"
#include "checkpointer/checkpointer_internal.h"
#include "checkpointer/overhead_budget.h"
#include "restore/restore_snapshot.h"
#include "torch/base_identity.h"
#include "torch/contract_cache.h"
#include "torch/exception_boundary.h"

namespace trainsnap {

namespace {

std::string CaptureContext(int64_t step) { return "capture step " + std::to_string(step); }

}  // namespace

CaptureHandle::CaptureHandle(std::shared_ptr<internal::CaptureState> state) : state_(std::move(state)) {}

Status CaptureHandle::Wait() const {
  if (!state_) return Status::InvalidArgument("wait on an empty CaptureHandle");
  return state_->Wait();
}

bool CaptureHandle::Ready() const { return state_ == nullptr || state_->Ready(); }

int64_t CaptureHandle::step() const { return state_ ? state_->step() : 0; }

bool CaptureHandle::skipped() const { return state_ != nullptr && state_->skipped(); }

class Checkpointer::Impl {
 public:
  Impl(Store& store, CheckpointerOptions options)
      : store_(store),
        options_(std::move(options)),
        valid_(internal::OverheadBudget::Validate(options_.overhead_budget)),
        budget_(valid_.ok() ? options_.overhead_budget : 0, internal::OverheadBudget::Clock::now()),
        pipeline_(std::make_unique<internal::CapturePipeline>(
            store_,
            // 0 in the checkpointer's options defers to the store's
            // (StoreOptions::threads, StoreOptions::max_staging_bytes).
            options_.threads != 0 ? options_.threads : store_.options().threads,
            options_.max_staging_bytes != 0 ? options_.max_staging_bytes : store_.options().max_staging_bytes,
            options_.max_captures_in_flight)) {}

  // Times the capture for the overhead budget, which may skip it instead.
  Result<CaptureHandle> CaptureAsync(int64_t step, const TrainingState& state) {
    if (!valid_.ok()) {
      Status invalid = valid_.WithContext(CaptureContext(step));
      pipeline_->Failed(step, invalid);
      return invalid;
    }
    const auto start = internal::OverheadBudget::Clock::now();
    if (budget_.needs_estimate()) EstimateFirstCapture(state);
    if (budget_.ShouldSkip(start)) return CaptureHandle(pipeline_->Skipped(step));
    bool would_wait = false;
    Result<CaptureHandle> handle = Run(step, state, &would_wait);
    if (would_wait) return CaptureHandle(pipeline_->Skipped(step));
    budget_.Record(start, internal::OverheadBudget::Clock::now());
    return handle;
  }

  // Predicts the first capture's cost from the bytes it will stage. A state
  // that cannot be estimated is left unpredicted: its capture runs, and
  // fails with Stage's error (the same one) or is timed.
  void EstimateFirstCapture(const TrainingState& state) {
    uint64_t bytes = 0;
    Status estimated = internal::ExceptionBoundary([&]() -> Status {
      TRAINSNAP_ASSIGN_OR_RETURN(bytes, internal::EstimateStagedBytes(state, options_, &contracts_));
      return Status::OK();
    });
    if (estimated.ok()) budget_.EstimateFirst(bytes);
  }

  // Errors carry "capture step N"; admission and staging errors also count
  // for Flush. With a budget, sets *would_wait and returns an empty handle
  // instead of waiting at max_captures_in_flight.
  Result<CaptureHandle> Run(int64_t step, const TrainingState& state, bool* would_wait) {
    Status admitted =
        internal::ExceptionBoundary([&] { return Admit(step, would_wait); }).WithContext(CaptureContext(step));
    if (!admitted.ok()) {
      pipeline_->Failed(step, admitted);
      return admitted;
    }
    if (*would_wait) return CaptureHandle();
    internal::ChangeTracker* tracker = options_.skip_unchanged ? &tracker_ : nullptr;
    std::unique_ptr<internal::StagedSnapshot> staged;
    std::vector<std::shared_ptr<c10::Event>> ready;
    Status staging = internal::ExceptionBoundary([&]() -> Status {
      if (tracker) TRAINSNAP_RETURN_IF_ERROR(tracker->BeginCapture(store_, step));
      // Stage copies into pooled buffers (waiting at the bound) and queues
      // device readbacks through this scope.
      internal::StagingScope scope(pipeline_->staging_pool(), &pipeline_->copy_pool());
      Result<std::unique_ptr<internal::StagedSnapshot>> result =
          internal::Stage(step, state, options_, base_, internal::Reuse{tracker, &store_}, &scope, &contracts_);
      if (!result.ok()) return result.status();
      staged = std::move(result).value();
      ready = scope.Finish();
      return Status::OK();
    }).WithContext(CaptureContext(step));
    if (!staging.ok()) {
      if (tracker) tracker->Abandoned(step);
      pipeline_->Failed(step, staging);
      return staging;
    }
    std::shared_ptr<internal::CaptureState> capture =
        pipeline_->Submit(std::move(staged), std::move(ready), [tracker, step](const Status& status) {
          if (tracker) status.ok() ? tracker->Committed(step) : tracker->Abandoned(step);
        });
    return CaptureHandle(std::move(capture));
  }

  // AlreadyExists for a step in flight or stored, known before anything is
  // staged (the commit would refuse it); then waits for a pipeline slot.
  Status Admit(int64_t step, bool* would_wait) {
    if (budget_.enabled()) {
      TRAINSNAP_ASSIGN_OR_RETURN(bool admitted, pipeline_->TryAdmit(step));
      if (!admitted) {
        *would_wait = true;
        return Status::OK();
      }
    } else {
      TRAINSNAP_RETURN_IF_ERROR(pipeline_->Admit(step));
    }
    TRAINSNAP_ASSIGN_OR_RETURN(bool stored, store_.Contains(step));
    if (stored) {
      return Status::AlreadyExists(
          "already stored (to train on from an earlier step, restore it with RestoreOptions::discard_later "
          "or RollbackTo)");
    }
    return Status::OK();
  }

  Status Flush() { return pipeline_->Flush(); }
  void WaitIdle() { pipeline_->WaitIdle(); }

  // The first phase of a restore (restore/restore_snapshot.h).
  Result<std::unique_ptr<internal::PreparedRestore>> Prepare(int64_t step, const TrainingState& target,
                                                             const RestoreOptions& options,
                                                             const internal::SnapshotInput& input) {
    pipeline_->WaitIdle();  // a capture in flight may be the one to restore
    // The restored bytes must be captured again in full once: forget what
    // the tracker knew (restore copies in place, but be independent of how).
    tracker_.Reset();
    return internal::PrepareRestore(store_, step, target, options, options_.base_label, base_, &contracts_, input);
  }

  // Both phases; discard_later deletes the later snapshots between them, so
  // that a failed deletion leaves every live object as it was.
  Status Restore(int64_t step, const TrainingState& target, const RestoreOptions& options) {
    TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<internal::PreparedRestore> prepared, Prepare(step, target, options, {}));
    if (options.discard_later) {
      Status discarded = store_.Rollback(step);
      if (!discarded.ok()) {
        Status undone = prepared->Abandon();
        discarded = discarded.WithContext("discard_later");
        if (!undone.ok()) return Status::Aborted(discarded.ToString() + undone.message());
        return discarded;
      }
    }
    return prepared->Apply();
  }

  PipelineStats Stats() const {
    internal::StagingPoolStats s = pipeline_->staging_pool()->stats();
    PipelineStats out;
    out.max_staging_bytes = s.max_bytes;
    out.staging_in_use_bytes = s.in_use_bytes;
    out.staging_cached_bytes = s.cached_bytes;
    out.staging_peak_bytes = s.peak_in_use_bytes;
    out.staging_allocations = s.allocations;
    out.staging_reuses = s.reuses;
    out.staging_waits = s.waits;
    internal::CapturePipeline::LagStats lag = pipeline_->lag_stats();
    out.last_committed_step = lag.last_committed_step;
    out.captures_in_flight = lag.in_flight;
    out.max_captures_in_flight = lag.max_in_flight;
    out.capture_waits = lag.admit_waits;
    out.captures_skipped = lag.skipped;
    out.steps_between_last_commits = lag.steps_between_last_commits;
    return out;
  }

  Store& store() { return store_; }

 private:
  Store& store_;
  CheckpointerOptions options_;
  // Caches the frozen base's content hash across captures and restores.
  internal::BaseIdentityBuilder base_;
  // The models' contract, rebuilt only when they change (capture and restore).
  internal::ContractCache contracts_;
  // Unchanged-tensor detection across captures (CheckpointerOptions::skip_unchanged).
  internal::ChangeTracker tracker_;
  // OverheadBudget::Validate of the options (Open's result).
  const Status valid_;
  internal::OverheadBudget budget_;
  // Last member: destroyed (flushed) first, while the tracker still lives.
  std::unique_ptr<internal::CapturePipeline> pipeline_;
};

Result<std::unique_ptr<Checkpointer>> Checkpointer::Open(Store& store, CheckpointerOptions options) {
  TRAINSNAP_RETURN_IF_ERROR(internal::OverheadBudget::Validate(options.overhead_budget));
  return std::make_unique<Checkpointer>(store, std::move(options));
}

Checkpointer::Checkpointer(Store& store, CheckpointerOptions options)
    : impl_(std::make_unique<Impl>(store, std::move(options))) {}

Checkpointer::~Checkpointer() = default;

Status Checkpointer::Capture(int64_t step, const TrainingState& state) {
  TRAINSNAP_ASSIGN_OR_RETURN(CaptureHandle handle, CaptureAsync(step, state));
  return handle.Wait();
}

Result<CaptureHandle> Checkpointer::CaptureAsync(int64_t step, const TrainingState& state) {
  // Impl converts exceptions and adds the context itself.
  return impl_->CaptureAsync(step, state);
}

Status Checkpointer::Flush() { return impl_->Flush(); }

PipelineStats Checkpointer::pipeline_stats() const { return impl_->Stats(); }

namespace internal {

Result<std::unique_ptr<PreparedRestore>> CheckpointerInternal::PrepareRestore(Checkpointer& checkpointer, int64_t step,
                                                                              const TrainingState& target,
                                                                              const RestoreOptions& options,
                                                                              const SnapshotInput& input) {
  const std::string context = "restore step " + std::to_string(step);
  if (options.discard_later) {
    return Status::InvalidArgument(context + ": discard_later in a two-phase restore (delete at the boundary)");
  }
  std::unique_ptr<PreparedRestore> prepared;
  Status status = ExceptionBoundary([&]() -> Status {
    TRAINSNAP_ASSIGN_OR_RETURN(prepared, checkpointer.impl_->Prepare(step, target, options, input));
    return Status::OK();
  });
  if (!status.ok()) return status.WithContext(context);
  return prepared;
}

}  // namespace internal

Status Checkpointer::Restore(int64_t step, const TrainingState& target, const RestoreOptions& options) {
  return internal::ExceptionBoundary([&] { return impl_->Restore(step, target, options); })
      .WithContext("restore step " + std::to_string(step));
}

Status Checkpointer::RollbackTo(int64_t step, const TrainingState& target) {
  RestoreOptions options;
  options.discard_later = true;
  return Restore(step, target, options);
}

Result<int64_t> Checkpointer::RestoreLatest(const TrainingState& target, const RestoreOptions& options) {
  int64_t restored = -1;
  Status status = internal::ExceptionBoundary([&]() -> Status {
    impl_->WaitIdle();  // the latest may still be in flight
    TRAINSNAP_ASSIGN_OR_RETURN(std::optional<int64_t> latest, impl_->store().Latest());
    if (!latest.has_value()) return Status::NotFound("the store holds no snapshot");
    TRAINSNAP_RETURN_IF_ERROR(impl_->Restore(*latest, target, options).WithContext("step " + std::to_string(*latest)));
    restored = *latest;
    return Status::OK();
  }).WithContext("restore latest");
  if (!status.ok()) return status;
  return restored;
}

}  // namespace trainsnap
