#include "trainsnap/checkpointer.h"

#include <exception>
#include <string>

#include <c10/util/Exception.h>

#include "capture/base_identity.h"
#include "capture/encode.h"
#include "capture/stage.h"
#include "restore/restore_snapshot.h"

namespace trainsnap {

class Checkpointer::Impl {
 public:
  Impl(Store& store, CheckpointerOptions options) : store_(store), options_(std::move(options)) {}

  Status Capture(int64_t step, const TrainingState& state) {
    internal::ChangeTracker* tracker = options_.skip_unchanged ? &tracker_ : nullptr;
    if (tracker) TRAINSNAP_RETURN_IF_ERROR(tracker->BeginCapture(store_, step));
    Status s = CaptureTracked(step, state, tracker);
    if (tracker) s.ok() ? tracker->Committed(step) : tracker->Abandoned(step);
    return s;
  }

  Status CaptureTracked(int64_t step, const TrainingState& state, internal::ChangeTracker* tracker) {
    TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<internal::StagedSnapshot> staged,
                               internal::Stage(step, state, options_, base_, tracker));
    TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<SnapshotWriter> writer, store_.BeginSnapshot(step));
    TRAINSNAP_RETURN_IF_ERROR(internal::EncodeTensors(*staged, *writer));
    return internal::CommitSnapshot(*staged, *writer).status();
  }

  Status Restore(int64_t step, const TrainingState& target, const RestoreOptions& options) {
    // The restored bytes must be captured again in full once: forget what
    // the tracker knew (restore copies in place, but be independent of how).
    tracker_.Reset();
    return internal::RestoreSnapshot(store_, step, target, options, options_.base_label, base_);
  }

  Store& store() { return store_; }

 private:
  Store& store_;
  CheckpointerOptions options_;
  // Caches the frozen base's content hash across captures and restores.
  internal::BaseIdentityBuilder base_;
  // Unchanged-tensor detection across captures (CheckpointerOptions::skip_unchanged).
  internal::ChangeTracker tracker_;
};

namespace {

// The exception boundary: LibTorch reports errors by throwing c10::Error.
template <class Fn>
Status Guarded(const std::string& context, Fn&& fn) {
  try {
    return fn().WithContext(context);
  } catch (const c10::Error& e) {
    return Status::InvalidArgument(context + ": LibTorch: " + e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    return Status::Aborted(context + ": out of memory");
  } catch (const std::exception& e) {
    return Status::Aborted(context + ": " + e.what());
  }
}

}  // namespace

Checkpointer::Checkpointer(Store& store, CheckpointerOptions options)
    : impl_(std::make_unique<Impl>(store, std::move(options))) {}

Checkpointer::~Checkpointer() = default;

Status Checkpointer::Capture(int64_t step, const TrainingState& state) {
  return Guarded("capture step " + std::to_string(step), [&] { return impl_->Capture(step, state); });
}

Status Checkpointer::Restore(int64_t step, const TrainingState& target, const RestoreOptions& options) {
  return Guarded("restore step " + std::to_string(step), [&] { return impl_->Restore(step, target, options); });
}

Status Checkpointer::RestoreLatest(const TrainingState& target, const RestoreOptions& options) {
  return Guarded("restore latest", [&]() -> Status {
    TRAINSNAP_ASSIGN_OR_RETURN(std::optional<int64_t> latest, impl_->store().Latest());
    if (!latest.has_value()) return Status::NotFound("the store holds no snapshot");
    return impl_->Restore(*latest, target, options).WithContext("step " + std::to_string(*latest));
  });
}

}  // namespace trainsnap
