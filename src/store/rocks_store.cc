// The facade's reads and the snapshot writer's side of the store: each read
// takes a view of the session and asks the part that owns the answer.
#include "store/rocks_store.h"

#include "store/garbage_collector.h"
#include "store/messages.h"
#include "store/snapshot_writer.h"
#include "store/store_pin.h"
#include "store/store_stats.h"
#include "store/verifier.h"

namespace trainsnap::internal {

RocksStore::~RocksStore() {
  AbortIfPinned(this, path());  // a Checkpointer's captures in flight would use it after free
  if (pool_) pool_->join();
}

Status RocksStore::CheckWritable(std::string_view what) const {
  if (read_only()) return Status::NotSupported(std::string(what) + ": store " + path() + " is open read-only");
  return Status::OK();
}

Status RocksStore::Refresh() {
  if (!read_only()) return Status::OK();
  // The commit log first (see OpenReadOnlyInstance); on failure the old
  // instance stays usable.
  auto log = CommitLog::Read(path());
  TRAINSNAP_RETURN_IF_ERROR(session_->Refresh());
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  return catalog_->CheckCommitLog(log.ok() ? *log : std::nullopt, /*sync=*/true).WithContext("refresh " + path());
}

Result<std::vector<SnapshotInfo>> RocksStore::List() {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  return catalog_->ListInView();
}

Result<std::optional<int64_t>> RocksStore::Latest() {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  return catalog_->Latest();
}

Result<SnapshotInfo> RocksStore::Info(int64_t step) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  return catalog_->Info(step);
}

Result<bool> RocksStore::Contains(int64_t step) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  return catalog_->Contains(step);
}

Result<std::string> RocksStore::Manifest(int64_t step) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  return catalog_->Manifest(step);
}

Result<std::string> RocksStore::SharedManifest(int64_t step) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  return catalog_->SharedManifest(step);
}

Result<std::vector<TensorRecord>> RocksStore::Tensors(int64_t step) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  return catalog_->Tensors(step);
}

Result<TensorRecord> RocksStore::Tensor(int64_t step, uint64_t param_id, std::string_view role) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  return catalog_->Tensor(step, param_id, role);
}

Status RocksStore::ReadTensor(const TensorRecord& record, void* dst, size_t dst_bytes) {
  TensorRead read;
  read.record = &record;
  read.dst = dst;
  read.dst_bytes = dst_bytes;
  return ReadTensors({read});
}

Status RocksStore::ReadTensors(const std::vector<TensorRead>& reads) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  return chunks_->ReadTensors(reads);
}

Result<std::unique_ptr<SnapshotWriter>> RocksStore::BeginSnapshot(int64_t step, const SnapshotOptions& options) {
  TRAINSNAP_RETURN_IF_ERROR(CheckWritable("begin snapshot " + StepName(step)));
  return std::unique_ptr<SnapshotWriter>(new SnapshotWriterImpl(static_cast<ChunkSink*>(this), step, options));
}

bool RocksStore::MayDelta(const DeltaBase& bases, size_t index) const {
  const int interval = options_.keyframe_interval;
  if (options_.delta_reference == DeltaReference::kKeyframe) {
    // Against the keyframe, until the keyframe interval is reached.
    return bases.depths[index] == 0 && static_cast<int>(bases.ages[index]) + 1 < interval;
  }
  // Against the previous version, while the chain stays below the interval.
  return bases.depths[index] != kUnknownDeltaDepth && static_cast<int>(bases.depths[index]) + 1 < interval;
}

Result<VerifyReport> RocksStore::Verify(std::optional<int64_t> step, const ProgressFn& progress) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  return Verifier(*session_, *catalog_, *chunks_, *pool_).Verify(step, progress);
}

Result<StoreStats> RocksStore::Stats(const ProgressFn& progress) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  return CollectStats(*session_, *catalog_, *chunks_, progress);
}

Result<GcPlan> RocksStore::PlanCollection(const std::vector<int64_t>& steps, const ProgressFn& progress) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_->AcquireView(&view_lock));
  return GarbageCollector(*session_, *catalog_, *chunks_).Plan(steps, progress);
}

}  // namespace trainsnap::internal

namespace trainsnap {

Result<GcPlan> PlanCollection(Store& store, const std::vector<int64_t>& steps, const ProgressFn& progress) {
  return store.PlanCollection(steps, progress);
}

}  // namespace trainsnap
