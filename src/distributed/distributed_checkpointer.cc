#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#include "capture/pipeline.h"
#include "checkpointer/checkpointer_internal.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "distributed/drop_timing.h"
#include "distributed/rank_group.h"
#include "distributed/rank_restore.h"
#include "distributed/replica_placement.h"
#include "distributed/run_dir.h"
#include "distributed/run_dir_deletion.h"
#include "store/kill_point.h"
#include "store/retention.h"
#include "store/snapshot_drop.h"
#include "torch/manifest_codec.h"
#include "trainsnap/distributed.h"

namespace trainsnap {

namespace internal {

namespace {

// Kill points of the global commit (crash tests; src/store/kill_point.h).
constexpr char kKillBeforeGlobalCommit[] = "dist.before_global_commit";  // every rank committed locally
constexpr char kKillAfterGlobalCommit[] = "dist.after_global_commit";    // global record committed, ranks not told
// A rank has read its stores for an elastic restore, before the exchange.
constexpr char kKillRestoreRead[] = "dist.restore_read";

// The extra state every local snapshot held before the rank agreement moved
// to the restore's phase boundary: "rank R of N". Restore checks it and
// leaves it out, so that such snapshots still restore.
constexpr char kLegacyRankKey[] = "~trainsnap.rank";

// RankReport::values of a capture's agreement.
enum CaptureValue : size_t {
  kStep = 0,
  kLogicalBytes = 1,
  kStoredBytes = 2,
  kNewBytes = 3,
  kFingerprint = 4,  // of the replicated tensors' names, roles and sizes
  kVerify = 5,       // the replica check's stride (replica_check_stride), 0 when it is off
};

std::string StepText(int64_t step) { return "step " + std::to_string(step); }

// The global steps rank store `rank` belongs to.
std::set<int64_t> GlobalStepsOfRank(const std::map<int64_t, int>& worlds, int rank) {
  std::set<int64_t> steps;
  for (const auto& [step, world] : worlds) {
    if (rank < world) steps.insert(step);
  }
  return steps;
}

std::vector<int64_t> StepsOf(const std::map<int64_t, int>& worlds) {
  std::vector<int64_t> steps;
  for (const auto& [step, world] : worlds) steps.push_back(step);
  return steps;
}

// An accumulation window in the middle: its pending gradients belong to the
// ranks that captured it.
bool MidWindow(const proto::TrainingManifest& manifest) {
  return manifest.has_accumulation() && manifest.accumulation().micro_step() != 0;
}

// DistributedOptions::restart_window: the window starts again (micro-step 0,
// no weight accumulated) and the pending gradients restore as zeros.
void RestartWindow(proto::TrainingManifest* manifest) {
  if (!MidWindow(*manifest)) return;
  manifest->mutable_accumulation()->set_micro_step(0);
  manifest->mutable_accumulation()->set_weight_sum(0.0);
  for (proto::ContractParam& param : *manifest->mutable_params()) {
    if (param.grad() == proto::GRAD_STORED) param.set_grad(proto::GRAD_ZERO);
  }
}

// Removes the legacy rank tag of a snapshot rank `home` of `captured` took,
// after checking that it names that rank.
Status DropLegacyRankTag(proto::TrainingManifest* manifest, int home, int captured) {
  auto* extras = manifest->mutable_extra();
  for (int i = 0; i < extras->size(); ++i) {
    if (extras->Get(i).name() != kLegacyRankKey) continue;
    const std::string expected = "rank " + std::to_string(home) + " of " + std::to_string(captured);
    if (extras->Get(i).state() != expected) {
      return Status::ContractMismatch("the store of rank " + std::to_string(home) + " holds a snapshot of `" +
                                      extras->Get(i).state() + "`");
    }
    extras->DeleteSubrange(i, 1);
    return Status::OK();
  }
  return Status::OK();
}

// The optimizers of the stores a rank read, for the others: per store, its
// rank and a TrainingManifest holding only its optimizers.
std::string EncodeOptimizerParts(const std::vector<std::pair<int, std::string>>& parts) {
  std::string out;
  for (const auto& [rank, bytes] : parts) {
    const uint32_t r = static_cast<uint32_t>(rank);
    const uint64_t n = bytes.size();
    out.append(reinterpret_cast<const char*>(&r), sizeof(r));
    out.append(reinterpret_cast<const char*>(&n), sizeof(n));
    out += bytes;
  }
  return out;
}

Status DecodeOptimizerParts(const std::string& bytes, std::map<int, std::string>* out) {
  size_t at = 0;
  while (at < bytes.size()) {
    uint32_t rank = 0;
    uint64_t n = 0;
    if (bytes.size() - at < sizeof(rank) + sizeof(n)) return Status::Corruption("exchanged optimizers: truncated");
    std::memcpy(&rank, bytes.data() + at, sizeof(rank));
    std::memcpy(&n, bytes.data() + at + sizeof(rank), sizeof(n));
    at += sizeof(rank) + sizeof(n);
    if (n > bytes.size() - at) return Status::Corruption("exchanged optimizers: truncated");
    (*out)[static_cast<int>(rank)] = bytes.substr(at, n);
    at += n;
  }
  return Status::OK();
}

}  // namespace

class DistributedState {
 public:
  struct Pending {
    int64_t step = 0;
    Status staged;  // a staging error of this rank; OK when `local` was returned
    CaptureHandle local;
    std::shared_ptr<CaptureState> global;
    std::optional<Placed> placed;  // the placement's decision; absent when staging failed before it
  };

  DistributedState(std::string run_dir, DistributedOptions options) : run_dir_(std::move(run_dir)),
                                                                      options_(std::move(options)) {}
  ~DistributedState() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
      cv_.notify_all();
    }
    if (committer_.joinable()) committer_.join();
    checkpointer_.reset();  // waits for the local captures before its store closes
  }

  Status Open(const c10::intrusive_ptr<c10d::ProcessGroup>& user_group);
  Result<CaptureHandle> CaptureAsync(int64_t step, const TrainingState& state);
  Status Capture(int64_t step, const TrainingState& state);
  Status Flush();
  // rollback: also delete every step after `step`, global records first.
  Status Restore(int64_t step, const TrainingState& target, bool rollback = false);
  Result<int64_t> RestoreLatest(const TrainingState& target);
  Result<std::vector<int64_t>> Steps();
  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }

 private:
  // What one rank read for a restore before the exchange.
  struct RestoreRead {
    int captured = 0;  // ranks that took the step
    int home = 0;      // the rank whose snapshot this rank restores
    Store* home_store = nullptr;
    google::protobuf::Arena arena;
    proto::TrainingManifest* manifest = nullptr;  // the home snapshot's, adjusted; in `arena`
    torch::Tensor model;                          // PackTensors of the replicated model tensors it read
    torch::Tensor optimizer;                      // ... and of the replicated optimizer state
    std::string optimizer_parts;                  // sharded, elastic: EncodeOptimizerParts of its stores
  };

  void CommitterLoop();
  Status CommitGlobally(const Pending& pending);
  // After every rank committed locally: the replicated tensors are the same
  // (names, roles, sizes) on every rank, and with verify_replicas, hold the
  // same bytes. The same status on every rank (it depends on `reports` and
  // collectives only).
  Status CheckReplicas(const Pending& pending, const std::vector<RankReport>& reports, const std::string& what);
  // Rank 0: commits the global record of `step`, then deletes the global
  // records retention drops, in order, up to the first failure; returns how
  // many it deleted (the other ranks delete their snapshots of those only).
  Result<int64_t> CommitGlobalRecord(int64_t step, const std::vector<RankReport>& reports);
  // Every rank store this rank keeps: its own, then those of ranks the group
  // no longer has that it looks after.
  std::vector<Store*> KeptStores();
  // Deletes this rank's snapshots of the steps retention dropped and the
  // chunks only they referenced (DropSnapshots).
  void DropRetained(const std::vector<int64_t>& dropped);
  void WaitIdle() EXCLUDES(mu_);
  Status DropLocalAfterRollback() EXCLUDES(mu_);
  // RankGroup::Agree; a failed collective also marks this checkpointer broken.
  Result<std::vector<RankReport>> Agree(const RankReport& mine, const std::string& what);
  Result<std::vector<torch::Tensor>> Exchange(const torch::Tensor& mine, const std::string& what);
  Result<std::vector<std::string>> AllGather(const std::string& mine, const std::string& what);
  Result<GlobalRecord> ReadGlobalRecord(int64_t step);

  // Restore's phases (Restore reads top to bottom).
  Status CheckRestorable(int64_t step, GlobalRecord* record);
  Status CheckWindow(int64_t step, int captured);
  Status ReadForRestore(int64_t step, const GlobalRecord& record, RestoreRead* read);
  Result<std::unique_ptr<PreparedRestore>> PrepareRestore(int64_t step, const TrainingState& target,
                                                          const GlobalRecord& record, RestoreRead& read,
                                                          const std::vector<torch::Tensor>& model,
                                                          const std::vector<torch::Tensor>& optimizer,
                                                          const std::vector<std::string>& parts);
  Status RollbackGlobal(int64_t step);
  // Rank store `rank` for reading: this rank's own, one it looks after, or
  // one opened read-only for the restore in progress.
  Result<Store*> RankStore(int rank);

  const std::string run_dir_;
  const DistributedOptions options_;
  std::unique_ptr<RankGroup> group_;
  std::unique_ptr<Store> global_;  // rank 0: writable; other ranks: read-only
  std::unique_ptr<Store> local_;
  // Writable stores of ranks >= size() (a run resumed on fewer ranks) whose
  // rank r is rank() modulo size(): this rank deletes their snapshots of the
  // steps it drops and reads them at a restore. Used by the committer thread
  // or by the training thread while the committer is idle.
  std::map<int, std::unique_ptr<Store>> kept_;
  std::map<int, std::unique_ptr<Store>> restore_sources_;  // read-only, for one restore (training thread)
  std::map<Store*, bool> needs_full_collection_;           // a drop's collection failed (committer)
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<ReplicaPlacement> placement_;  // the local Checkpointer's TensorPlacement

  // A leaf lock (docs/code-map.md): never held across a collective, a store
  // call or a Checkpointer call.
  Mutex mu_;
  std::condition_variable cv_;  // queue_ changed or stop_ set
  std::deque<Pending> queue_ GUARDED_BY(mu_);  // front: being committed by the committer thread
  bool stop_ GUARDED_BY(mu_) = false;
  Status flush_error_ GUARDED_BY(mu_);  // first error since the last Flush
  // The first global step that failed since the last Flush: the next
  // CaptureAsync returns it, on every rank.
  Status failed_ GUARDED_BY(mu_);
  Status broken_ GUARDED_BY(mu_);  // a failed collective: every later call fails with it
  // Global steps and their world sizes. Written by the committer thread, or
  // by the training thread while the committer is idle (Open, Restore).
  std::map<int64_t, int> global_worlds_ GUARDED_BY(mu_);
  // A rollback whose deletion of this rank's later snapshots is still due.
  std::optional<int64_t> pending_local_rollback_ GUARDED_BY(mu_);
  std::thread committer_;
};

Status DistributedState::Open(const c10::intrusive_ptr<c10d::ProcessGroup>& user_group) {
  if (!user_group) return Status::InvalidArgument("open " + run_dir_ + ": the process group is null");
  if (options_.timeout.count() <= 0) return Status::InvalidArgument("open " + run_dir_ + ": timeout must be positive");
  if (options_.replica_check_stride < 1) {
    return Status::InvalidArgument("open " + run_dir_ + ": replica_check_stride must be at least 1, not " +
                                   std::to_string(options_.replica_check_stride));
  }
  // Each rank would decide alone, and a collective capture cannot be skipped on some ranks only.
  if (options_.checkpointer.overhead_budget != 0) {
    return Status::NotSupported("open " + run_dir_ + ": CheckpointerOptions::overhead_budget (ranks would skip alone)");
  }
  std::error_code ec;
  std::filesystem::create_directories(run_dir_, ec);
  if (ec) return Status::IOError("open " + run_dir_ + ": cannot create the run directory: " + ec.message());
  TRAINSNAP_ASSIGN_OR_RETURN(group_, RankGroup::Create(run_dir_, user_group, options_.timeout));

  // Rank 0 owns the global store; the others read it once it exists.
  StoreOptions global_options;
  global_options.sync = options_.store.sync;
  global_options.reserve_bytes = 0;  // records of a few hundred bytes; nothing to give back on a full disk
  global_options.threads = 1;
  Status mine;
  if (rank() == 0) {
    Result<std::unique_ptr<Store>> global = Store::Open(GlobalStorePath(run_dir_), global_options);
    if (global.ok()) {
      global_ = std::move(global).value();
    } else {
      mine = global.status().WithContext("global store");
    }
  }
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<RankReport> opened, Agree({mine, {}}, "open " + run_dir_));
  TRAINSNAP_RETURN_IF_ERROR(FirstFailure(opened).WithContext("open " + run_dir_));

  // The committer is not started yet: the steps go into global_worlds_ once
  // every rank agreed on their count.
  std::map<int64_t, int> worlds;
  mine = [&]() -> Status {
    if (rank() != 0) {
      TRAINSNAP_ASSIGN_OR_RETURN(global_, Store::OpenReadOnly(GlobalStorePath(run_dir_)));
    }
    TRAINSNAP_ASSIGN_OR_RETURN(std::vector<SnapshotInfo> global_list, global_->List());
    for (const SnapshotInfo& info : global_list) {
      TRAINSNAP_ASSIGN_OR_RETURN(std::string bytes, global_->Manifest(info.step));
      Result<GlobalRecord> record = ParseGlobalRecord(bytes);
      if (!record.ok()) return record.status().WithContext("global " + StepText(info.step));
      worlds[info.step] = record->world_size;
    }
    StoreOptions local_options = options_.store;
    local_options.retention = RetentionPolicy{};  // applied to global steps by the committer
    TRAINSNAP_ASSIGN_OR_RETURN(local_, Store::Open(RankStorePath(run_dir_, rank()), local_options));
    // The stores of ranks this group no longer has: rank k's is looked after
    // by rank k % size().
    StoreOptions kept_options = local_options;
    kept_options.create_if_missing = false;
    for (int k = size(); k < CountRankStores(run_dir_, size()); ++k) {
      if (k % size() != rank()) continue;
      Result<std::unique_ptr<Store>> kept = Store::Open(RankStorePath(run_dir_, k), kept_options);
      if (!kept.ok()) return kept.status().WithContext(RankStoreName(k));
      kept_[k] = std::move(kept).value();
    }
    // Local snapshots of steps that never became global (a crash between the
    // local and the global commit, or a capture another rank failed) are not
    // restorable: delete them, so that their steps may be captured again.
    std::vector<std::pair<int, Store*>> stores{{rank(), local_.get()}};
    for (auto& [k, store] : kept_) stores.emplace_back(k, store.get());
    for (const auto& [k, store] : stores) {
      TRAINSNAP_ASSIGN_OR_RETURN(std::vector<int64_t> local_only, LocalOnlySteps(*store, GlobalStepsOfRank(worlds, k)));
      TRAINSNAP_RETURN_IF_ERROR(DeleteRankSnapshots(*store, local_only).WithContext("deleting the local-only steps"));
      // Their chunks go now; a collection that cannot run (e.g. lost commits
      // unacknowledged) leaves them to a later one and fails nothing.
      if (!local_only.empty()) (void)store->CollectGarbage();
    }
    return Status::OK();
  }();
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<RankReport> ready,
                             Agree({mine, {static_cast<int64_t>(worlds.size())}}, "open " + run_dir_));
  TRAINSNAP_RETURN_IF_ERROR(FirstFailure(ready).WithContext("open " + run_dir_));
  for (size_t r = 0; r < ready.size(); ++r) {
    if (ready[r].values[0] != static_cast<int64_t>(worlds.size())) {
      return Status::Aborted("open " + run_dir_ + ": rank " + std::to_string(r) + " sees " +
                             std::to_string(ready[r].values[0]) + " global steps, rank " + std::to_string(rank()) +
                             " sees " + std::to_string(worlds.size()) + " (do all ranks share the run directory?)");
    }
  }
  {
    MutexLock lock(&mu_);
    global_worlds_ = std::move(worlds);
  }
  try {
    CheckpointerOptions checkpointer_options = options_.checkpointer;
    if (options_.model_replicated || options_.optimizer_replicated) {
      // Several ranks share a node: a rank's hashing takes at most 8 of its
      // cores unless the options name a thread count.
      const int threads = options_.checkpointer.threads > 0 ? options_.checkpointer.threads
                          : options_.store.threads > 0
                              ? options_.store.threads
                              : std::min(8, static_cast<int>(std::thread::hardware_concurrency()));
      // One rank has no replica to compare with: it hashes nothing (the
      // check's cost, a stall of up to 1.7x on 2 cores, would buy nothing).
      const bool hash_replicas = options_.verify_replicas && size() > 1;
      placement_ =
          std::make_unique<ReplicaPlacement>(options_.model_replicated, options_.optimizer_replicated, hash_replicas,
                                             rank(), size(), threads, options_.replica_check_stride);
      checkpointer_options.placement = placement_.get();
    }
    checkpointer_ = std::make_unique<Checkpointer>(*local_, checkpointer_options);
    committer_ = std::thread([this] { CommitterLoop(); });
  } catch (const std::exception& e) {  // std::system_error, std::bad_alloc
    return Status::Aborted("open " + run_dir_ + ": cannot start the committer thread: " + e.what());
  }
  return Status::OK();
}

Result<CaptureHandle> DistributedState::CaptureAsync(int64_t step, const TrainingState& state) {
  // The previous captures' outcomes first: then every rank knows whether a
  // global step failed, and all return the same error here, or none does.
  WaitIdle();
  {
    MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
    if (!failed_.ok()) return failed_;
  }
  Pending pending;
  pending.step = step;
  pending.global = std::make_shared<CaptureState>(step);
  pending.staged = DropLocalAfterRollback().WithContext("capture " + StepText(step));
  if (pending.staged.ok()) {
    Result<CaptureHandle> local = checkpointer_->CaptureAsync(step, state);
    if (placement_) {
      // Waits for the replica hashes: the caller may change the tensors once
      // this returns.
      Result<std::optional<Placed>> placed = placement_->Take(step);
      if (placed.ok()) {
        pending.placed = std::move(placed).value();
      } else if (local.ok()) {
        local = placed.status().WithContext("capture " + StepText(step));
      }
    }
    if (local.ok()) {
      pending.local = std::move(local).value();
    } else {
      pending.staged = local.status();
    }
  }
  // A rank that failed to stage still takes part in the step's agreement, so
  // that every rank's committer meets the same steps in the same order.
  const Status staged = pending.staged;
  CaptureHandle handle(pending.global);
  {
    MutexLock lock(&mu_);
    if (!staged.ok() && flush_error_.ok()) flush_error_ = staged;
    queue_.push_back(std::move(pending));
    cv_.notify_all();
  }
  if (!staged.ok()) return staged;
  return handle;
}

Status DistributedState::Capture(int64_t step, const TrainingState& state) {
  Result<CaptureHandle> handle = CaptureAsync(step, state);
  Status status = handle.ok() ? handle->Wait() : handle.status();
  // Once the step settled on every rank (a staging error takes part in the
  // agreement too), the caller has its error: the next capture need not
  // repeat it.
  WaitIdle();
  if (!status.ok()) {
    MutexLock lock(&mu_);
    failed_ = Status::OK();
  }
  return status;
}

void DistributedState::CommitterLoop() {
  for (;;) {
    Pending pending;
    {
      MutexLock lock(&mu_);
      while (!stop_ && queue_.empty()) lock.Wait(cv_);
      if (queue_.empty()) return;  // stop_ and drained
      pending = queue_.front();
    }
    Status broken;
    {
      MutexLock lock(&mu_);
      broken = broken_;
    }
    Status outcome;
    if (!broken.ok()) {
      // A local capture that was staged still commits (or fails) on the
      // pipeline: wait for it; Open decides its snapshot's fate.
      if (pending.staged.ok()) (void)pending.local.Wait();
      outcome = broken;
    } else {
      outcome = CommitGlobally(pending);
    }
    {
      // Before the handle completes: a Capture that saw the error clears it.
      MutexLock lock(&mu_);
      if (!outcome.ok() && failed_.ok()) failed_ = outcome;
      // The staging error was counted by CaptureAsync already.
      if (!outcome.ok() && pending.staged.ok() && flush_error_.ok()) flush_error_ = outcome;
    }
    pending.global->Finish(outcome);
    MutexLock lock(&mu_);
    queue_.pop_front();
    cv_.notify_all();
  }
}

Status DistributedState::CommitGlobally(const Pending& pending) {
  const int64_t step = pending.step;
  const std::string what = "capture " + StepText(step);
  // Phase 1: this rank's local commit.
  RankReport mine;
  mine.status = pending.staged.ok() ? pending.local.Wait() : pending.staged;
  mine.values[kStep] = step;
  if (mine.status.ok()) {
    Result<SnapshotInfo> info = local_->Info(step);
    if (info.ok()) {
      mine.values[kLogicalBytes] = static_cast<int64_t>(info->logical_bytes);
      mine.values[kStoredBytes] = static_cast<int64_t>(info->stored_bytes);
      mine.values[kNewBytes] = static_cast<int64_t>(info->new_bytes);
    } else {
      mine.status = info.status();
    }
  }
  const bool local_committed = pending.staged.ok() && mine.status.ok();
  if (pending.placed.has_value()) mine.values[kFingerprint] = static_cast<int64_t>(pending.placed->fingerprint);
  mine.values[kVerify] = options_.verify_replicas ? options_.replica_check_stride : 0;
  // Phase 2: agree on every rank's outcome.
  Result<std::vector<RankReport>> reports = Agree(mine, what);
  if (!reports.ok()) return reports.status();
  Status agreed = FirstFailure(*reports);
  for (size_t r = 0; agreed.ok() && r < reports->size(); ++r) {
    if ((*reports)[r].values[kStep] != step) {
      agreed = Status::InvalidArgument("ranks disagree on the step: rank " + std::to_string(rank()) + " captures " +
                                       std::to_string(step) + ", rank " + std::to_string(r) + " captures " +
                                       std::to_string((*reports)[r].values[kStep]));
    }
  }
  if (agreed.ok()) agreed = CheckReplicas(pending, *reports, what).WithContext(what);
  if (group_->broken()) {  // the replica exchange failed: as a failed agreement (the outcome is known: not global)
    MutexLock lock(&mu_);
    broken_ = agreed;
    return agreed;
  }
  // Phase 3: rank 0 commits the global record (one transaction), then tells
  // every rank how that went.
  RankReport outcome;  // rank 0's: the commit's status, and how many retention drops it made
  if (agreed.ok() && rank() == 0) {
    TRAINSNAP_KILL_POINT(kKillBeforeGlobalCommit);
    Result<int64_t> dropped = CommitGlobalRecord(step, *reports);
    TRAINSNAP_KILL_POINT(kKillAfterGlobalCommit);
    if (dropped.ok()) {
      outcome.values[0] = *dropped;
    } else {
      outcome.status = dropped.status();
    }
  }
  Result<std::vector<RankReport>> told = Agree(outcome, what);
  if (!told.ok()) {
    // Whether rank 0 committed is unknown here: keep the local snapshot; the
    // next Open keeps it if the step is global and deletes it otherwise.
    return told.status();
  }
  if (agreed.ok()) agreed = FirstFailure(*told);
  if (!agreed.ok()) {
    // Not global on any rank: the local snapshot goes, so that the step may
    // be captured again. Should the delete fail, the next Open deletes it.
    if (local_committed) (void)local_->Delete(step);
    return agreed;
  }
  // Retention over global steps: rank 0 deleted the first `dropped` global
  // records the policy drops (CommitGlobalRecord); every rank now deletes
  // its snapshots of those, and only those.
  std::vector<int64_t> drop;
  {
    MutexLock lock(&mu_);
    global_worlds_[step] = size();
    drop = StepsOutsidePolicy(StepsOf(global_worlds_), options_.store.retention);
    drop.resize(std::min(drop.size(), static_cast<size_t>(std::max<int64_t>(0, (*told)[0].values[0]))));
    for (int64_t gone : drop) global_worlds_.erase(gone);
  }
  DropRetained(drop);
  return Status::OK();
}

std::vector<Store*> DistributedState::KeptStores() {
  std::vector<Store*> stores{local_.get()};
  for (auto& [k, store] : kept_) stores.push_back(store.get());
  return stores;
}

void DistributedState::DropRetained(const std::vector<int64_t>& dropped) {
  if (dropped.empty()) return;
  DropTimer timer;
  for (Store* store : KeptStores()) {
    // Only what the dropped snapshots referenced is collected (no scan of a
    // store's chunks: a drop costs what it deletes, whatever the rank count).
    // After a failure (e.g. lost commits unacknowledged) the steps are still
    // deleted, and the next drop collects the whole store once.
    bool& full = needs_full_collection_[store];
    if (!full && DropSnapshots(*store, dropped).ok()) continue;
    // A failed delete is retried by the next Open (a snapshot of a step that
    // is not global); a failed collection by the next drop.
    if (!DeleteRankSnapshots(*store, dropped).ok()) continue;
    full = !store->CollectGarbage().ok();
  }
}

Status DistributedState::CheckReplicas(const Pending& pending, const std::vector<RankReport>& reports,
                                       const std::string& what) {
  for (size_t r = 1; r < reports.size(); ++r) {
    const int64_t first = reports[0].values[kVerify];
    const int64_t other = reports[r].values[kVerify];
    if ((first == 0) != (other == 0)) {
      return Status::InvalidArgument("verify_replicas is " + std::string(first ? "on" : "off") + " on rank 0, " +
                                     (other ? "on" : "off") + " on rank " + std::to_string(r));
    }
    if (first != other) {
      return Status::InvalidArgument("replica_check_stride is " + std::to_string(first) + " on rank 0, " +
                                     std::to_string(other) + " on rank " + std::to_string(r));
    }
    if (reports[r].values[kFingerprint] != reports[0].values[kFingerprint]) {
      return Status::InvalidArgument("the ranks hold different replicated tensors (names, roles or sizes): rank " +
                                     std::to_string(r) + " differs from rank 0");
    }
  }
  if (reports[0].values[kVerify] == 0 || reports.size() == 1) return Status::OK();
  // Every rank's hashes, in candidate order (the same tensors everywhere:
  // the fingerprints agree).
  const std::vector<uint64_t> none;
  const std::vector<uint64_t>& hashes = pending.placed.has_value() ? pending.placed->hashes : none;
  std::string mine(reinterpret_cast<const char*>(hashes.data()), hashes.size() * sizeof(uint64_t));
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<std::string> all, AllGather(mine, what + ": replica hashes"));
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() != mine.size()) {
      return Status::InvalidArgument("replica hashes of another size on rank " + std::to_string(r));
    }
  }
  for (size_t i = 0; i < hashes.size(); ++i) {
    std::vector<int> differ;
    uint64_t first = 0;
    for (size_t r = 0; r < all.size(); ++r) {
      uint64_t hash = 0;
      std::memcpy(&hash, all[r].data() + i * sizeof(uint64_t), sizeof(uint64_t));
      if (r == 0) first = hash;
      if (hash != first) differ.push_back(static_cast<int>(r));
    }
    if (differ.empty()) continue;
    std::string ranks;
    for (int r : differ) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    return Status::InvalidArgument("verify_replicas: replicated tensor " + pending.placed->names[i] +
                                   " differs between ranks: rank" + (differ.size() > 1 ? "s " : " ") + ranks +
                                   " hold" + (differ.size() > 1 ? "" : "s") + " other bytes than rank 0");
  }
  return Status::OK();
}

Result<int64_t> DistributedState::CommitGlobalRecord(int64_t step, const std::vector<RankReport>& reports) {
  GlobalRecord record;
  record.world_size = size();
  record.model_replicated = options_.model_replicated;
  record.optimizer_replicated = options_.optimizer_replicated;
  for (const RankReport& report : reports) {
    record.ranks.push_back(RankFigures{static_cast<uint64_t>(report.values[kLogicalBytes]),
                                       static_cast<uint64_t>(report.values[kStoredBytes]),
                                       static_cast<uint64_t>(report.values[kNewBytes])});
  }
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<SnapshotWriter> writer, global_->BeginSnapshot(step));
  writer->SetManifest(EncodeGlobalRecord(record));
  TRAINSNAP_RETURN_IF_ERROR(writer->Commit().status().WithContext("global record"));
  // Retention, step 1 of the run-directory protocol: the global records go
  // first, so that a crash in between leaves local snapshots of non-global
  // steps (deleted by the next Open), never a global step that a rank lacks.
  std::vector<int64_t> steps;
  {
    MutexLock lock(&mu_);
    steps = StepsOf(global_worlds_);
  }
  steps.push_back(step);
  size_t dropped = 0;
  // A failed delete leaves this and later drops for the next commit's
  // retention; the step itself is committed either way.
  (void)DeleteGlobalSteps(*global_, StepsOutsidePolicy(steps, options_.store.retention), &dropped);
  return static_cast<int64_t>(dropped);
}

Result<std::vector<RankReport>> DistributedState::Agree(const RankReport& mine, const std::string& what) {
  Result<std::vector<RankReport>> reports = group_->Agree(mine, what);
  if (!reports.ok()) {
    MutexLock lock(&mu_);
    broken_ = reports.status();
  }
  return reports;
}

Result<std::vector<torch::Tensor>> DistributedState::Exchange(const torch::Tensor& mine, const std::string& what) {
  Result<std::vector<torch::Tensor>> all = group_->Exchange(mine, what);
  if (!all.ok()) {
    MutexLock lock(&mu_);
    broken_ = all.status();
  }
  return all;
}

Result<std::vector<std::string>> DistributedState::AllGather(const std::string& mine, const std::string& what) {
  Result<std::vector<std::string>> all = group_->AllGather(mine, what);
  if (!all.ok()) {
    MutexLock lock(&mu_);
    broken_ = all.status();
  }
  return all;
}

void DistributedState::WaitIdle() {
  MutexLock lock(&mu_);
  while (!queue_.empty()) lock.Wait(cv_);
}

Status DistributedState::Flush() {
  WaitIdle();
  MutexLock lock(&mu_);
  Status first = std::move(flush_error_);
  flush_error_ = Status::OK();
  failed_ = Status::OK();
  if (first.ok()) return broken_;
  return first;
}

Result<GlobalRecord> DistributedState::ReadGlobalRecord(int64_t step) {
  if (global_->read_only()) TRAINSNAP_RETURN_IF_ERROR(global_->Refresh());
  Result<std::string> bytes = global_->Manifest(step);
  if (bytes.status().code() == StatusCode::kNotFound) {
    return Status::NotFound(StepText(step) + " is not a global step of " + run_dir_);
  }
  if (!bytes.ok()) return bytes.status();
  return ParseGlobalRecord(*bytes);
}

Result<Store*> DistributedState::RankStore(int rank) {
  if (rank == this->rank()) return local_.get();
  auto kept = kept_.find(rank);
  if (kept != kept_.end()) return kept->second.get();
  std::unique_ptr<Store>& store = restore_sources_[rank];
  if (!store) {
    Result<std::unique_ptr<Store>> opened = Store::OpenReadOnly(RankStorePath(run_dir_, rank));
    if (!opened.ok()) {
      restore_sources_.erase(rank);
      return opened.status().WithContext(RankStoreName(rank));
    }
    store = std::move(opened).value();
  }
  return store.get();
}

Status DistributedState::Restore(int64_t step, const TrainingState& target, bool rollback) {
  const std::string what = "restore " + StepText(step);
  {
    MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
  }
  WaitIdle();  // the committer is idle from here: the collectives below are the
               // only ones
  struct CloseSources {
    std::map<int, std::unique_ptr<Store>>& sources;
    ~CloseSources() { sources.clear(); }
  } close_sources{restore_sources_};

  // 1. The global record: the step is global, and this group can take it.
  GlobalRecord record;
  RankReport pre;
  pre.values[0] = step;
  pre.status = CheckRestorable(step, &record).WithContext(what);
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<RankReport> checked, Agree(pre, what));
  TRAINSNAP_RETURN_IF_ERROR(FirstFailure(checked));
  for (size_t r = 0; r < checked.size(); ++r) {
    if (checked[r].values[0] != step) {
      return Status::InvalidArgument(what + ": ranks disagree on the step: rank " + std::to_string(r) +
                                     " restores " + std::to_string(checked[r].values[0]));
    }
  }
  // 2. Every rank reads its home snapshot's manifest and the replicated
  // tensors of the stores assigned to it (each store is read by one rank).
  RestoreRead read;
  Status mine = ReadForRestore(step, record, &read).WithContext(what);
  TRAINSNAP_KILL_POINT(kKillRestoreRead);
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<RankReport> reads, Agree({mine, {}}, what));
  TRAINSNAP_RETURN_IF_ERROR(FirstFailure(reads));
  // 3. Every rank sends what it read to every rank.
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<torch::Tensor> model, Exchange(read.model, what + ": replicated tensors"));
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<torch::Tensor> optimizer,
                             Exchange(read.optimizer, what + ": replicated optimizer state"));
  std::vector<std::string> parts;
  if (!record.optimizer_replicated && record.world_size != size()) {
    TRAINSNAP_ASSIGN_OR_RETURN(parts, AllGather(read.optimizer_parts, what + ": optimizer shards"));
  }
  // 4. Prepare: validate, decode, and the extras' LoadState, on every rank.
  Result<std::unique_ptr<PreparedRestore>> prepared =
      PrepareRestore(step, target, record, read, model, optimizer, parts);
  model.clear();
  optimizer.clear();
  // 5. The phase boundary: every rank prepared, or none applies.
  Result<std::vector<RankReport>> agreement = Agree({prepared.status(), {}}, what);
  if (!agreement.ok()) return agreement.status();  // a prepared restore is abandoned with it
  Status agreed = FirstFailure(*agreement);
  if (agreed.ok() && rollback) agreed = RollbackGlobal(step);
  if (!agreed.ok()) {
    if (prepared.ok()) {
      Status undone = (*prepared)->Abandon();
      if (!undone.ok()) return Status::Aborted(agreed.ToString() + undone.message());
    }
    return agreed;
  }
  // 6. Apply: cannot fail for data reasons.
  Status applied = (*prepared)->Apply();
  // The later steps are no longer global; this rank's snapshots of them go
  // now, or (should that fail) before its next capture, or at the next Open.
  if (rollback) (void)DropLocalAfterRollback();
  return applied;
}

Status DistributedState::CheckRestorable(int64_t step, GlobalRecord* record) {
  TRAINSNAP_ASSIGN_OR_RETURN(*record, ReadGlobalRecord(step));
  if (record->optimizer_replicated != options_.optimizer_replicated) {
    return Status::ContractMismatch(std::string("optimizer layout: ") + StepText(step) + " was captured with " +
                                    (record->optimizer_replicated ? "a replicated" : "a sharded") +
                                    " optimizer, DistributedOptions::optimizer_replicated is " +
                                    (options_.optimizer_replicated ? "true" : "false"));
  }
  if (record->world_size == size()) return Status::OK();
  if (!record->model_replicated || !options_.model_replicated) {
    return Status::ContractMismatch("world size: " + StepText(step) + " was captured by " +
                                    std::to_string(record->world_size) + " ranks, this group has " +
                                    std::to_string(size()) +
                                    ": rank-local models (model_replicated = false) cannot be redistributed");
  }
  if (rank() == 0) TRAINSNAP_RETURN_IF_ERROR(CheckWindow(step, record->world_size));
  return Status::OK();
}

Status DistributedState::CheckWindow(int64_t step, int captured) {
  // Rank 0 took every global step: its snapshots say where the windows are.
  TRAINSNAP_ASSIGN_OR_RETURN(proto::TrainingManifest manifest, ReadManifest(*local_, step));
  if (!MidWindow(manifest) || options_.restart_window) return Status::OK();
  std::vector<int64_t> steps;
  {
    MutexLock lock(&mu_);
    steps = StepsOf(global_worlds_);
  }
  // The nearest step at a window boundary (the earlier of two as near).
  std::stable_sort(steps.begin(), steps.end(), [step](int64_t a, int64_t b) {
    const uint64_t da = a < step ? static_cast<uint64_t>(step - a) : static_cast<uint64_t>(a - step);
    const uint64_t db = b < step ? static_cast<uint64_t>(step - b) : static_cast<uint64_t>(b - step);
    return da < db;
  });
  std::string nearest = "no global step is at a window boundary";
  for (int64_t candidate : steps) {
    if (candidate == step) continue;
    Result<proto::TrainingManifest> other = ReadManifest(*local_, candidate);
    if (other.ok() && !MidWindow(*other)) {
      nearest = "the nearest window boundary is " + StepText(candidate);
      break;
    }
  }
  const proto::AccumulationState& window = manifest.accumulation();
  return Status::NotSupported(StepText(step) + " is in the middle of an accumulation window (micro-step " +
                              std::to_string(window.micro_step()) + " of " + std::to_string(window.size()) +
                              ") and was captured by " + std::to_string(captured) + " ranks, this group has " +
                              std::to_string(size()) + ": pending gradients cannot be redistributed; " + nearest +
                              " (or set DistributedOptions::restart_window)");
}

Status DistributedState::ReadForRestore(int64_t step, const GlobalRecord& record, RestoreRead* read) {
  read->captured = record.world_size;
  read->home = HomeRank(rank(), read->captured);
  TRAINSNAP_ASSIGN_OR_RETURN(read->home_store, RankStore(read->home));
  read->manifest = google::protobuf::Arena::CreateMessage<proto::TrainingManifest>(&read->arena);
  TRAINSNAP_RETURN_IF_ERROR(
      ReadManifest(*read->home_store, step, read->manifest).WithContext(RankStoreName(read->home)));
  TRAINSNAP_RETURN_IF_ERROR(DropLegacyRankTag(read->manifest, read->home, read->captured));
  const bool elastic = read->captured != size();
  if (elastic && options_.restart_window) RestartWindow(read->manifest);
  if (rank() >= read->captured) TRAINSNAP_RETURN_IF_ERROR(DeriveRng(read->manifest, rank()));
  TRAINSNAP_ASSIGN_OR_RETURN(
      ReplicatedTensors holders,
      ReplicatedHolders(*read->manifest, read->home, record.model_replicated, record.optimizer_replicated));
  std::vector<std::pair<Store*, std::vector<TensorKey>>> model, optimizer;
  std::vector<std::pair<int, std::string>> parts;
  for (int k : StoresReadBy(rank(), size(), read->captured)) {
    TRAINSNAP_ASSIGN_OR_RETURN(Store * store, RankStore(k));
    model.emplace_back(store, holders.model[k]);
    optimizer.emplace_back(store, holders.optimizer[k]);
    if (!record.optimizer_replicated && elastic) {
      TRAINSNAP_ASSIGN_OR_RETURN(proto::TrainingManifest manifest, ReadManifest(*store, step));
      proto::TrainingManifest only;
      *only.mutable_optimizers() = manifest.optimizers();
      parts.emplace_back(k, only.SerializeAsString());
    }
  }
  TRAINSNAP_ASSIGN_OR_RETURN(read->model, PackTensors(step, model));
  TRAINSNAP_ASSIGN_OR_RETURN(read->optimizer, PackTensors(step, optimizer));
  read->optimizer_parts = EncodeOptimizerParts(parts);
  return Status::OK();
}

Result<std::unique_ptr<PreparedRestore>> DistributedState::PrepareRestore(int64_t step, const TrainingState& target,
                                                                          const GlobalRecord& record, RestoreRead& read,
                                                                          const std::vector<torch::Tensor>& model,
                                                                          const std::vector<torch::Tensor>& optimizer,
                                                                          const std::vector<std::string>& parts) {
  const std::string what = "restore " + StepText(step);
  std::map<TensorKey, torch::Tensor> exchanged;
  for (const auto* packs : {&model, &optimizer}) {
    for (const torch::Tensor& packed : *packs) {
      Result<std::map<TensorKey, torch::Tensor>> tensors = UnpackTensors(packed);
      if (!tensors.ok()) return tensors.status().WithContext(what);
      exchanged.merge(*tensors);
    }
  }
  // Sharded optimizers restored on another world size: every store's.
  std::map<int, std::string> shards;
  for (const std::string& encoded : parts) {
    Status decoded = DecodeOptimizerParts(encoded, &shards);
    if (!decoded.ok()) return decoded.WithContext(what);
  }
  std::deque<proto::TrainingManifest> shard_manifests;
  std::vector<OptimizerPart> optimizer_parts;
  for (const auto& [k, bytes] : shards) {
    if (!shard_manifests.emplace_back().ParseFromString(bytes)) {
      return Status::Corruption(what + ": the optimizers of " + RankStoreName(k) + " do not parse");
    }
    optimizer_parts.push_back({RankStoreName(k), &shard_manifests.back()});
  }
  if (!record.optimizer_replicated && record.world_size != size() &&
      optimizer_parts.size() != static_cast<size_t>(record.world_size)) {
    return Status::Corruption(what + ": " + std::to_string(optimizer_parts.size()) + " optimizer shards for " +
                              std::to_string(record.world_size) + " ranks");
  }
  const int captured = record.world_size;
  RankTensorReader reader(
      *read.home_store,
      [this, captured](const std::string& source) -> Result<Store*> {
        const int k = ParseRankStoreName(source);
        if (k < 0 || k >= captured) {
          return Status::Corruption("the snapshot names source `" + source + "`, no rank store of a step of " +
                                    std::to_string(captured) + " ranks");
        }
        return RankStore(k);
      },
      exchanged);
  SnapshotInput input;
  input.manifest = read.manifest;
  input.reader = &reader;
  if (!optimizer_parts.empty()) input.optimizer_parts = &optimizer_parts;
  return CheckpointerInternal::PrepareRestore(*checkpointer_, step, target, RestoreOptions{}, input);
}

Status DistributedState::RollbackGlobal(int64_t step) {
  // Rank 0 deletes the later global records (one transaction), then every
  // rank learns how that went; only then may a rank drop its own.
  Status global;
  if (rank() == 0) global = RollbackGlobalSteps(*global_, step);
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<RankReport> told, Agree({global, {}}, "roll back to " + StepText(step)));
  TRAINSNAP_RETURN_IF_ERROR(FirstFailure(told));
  MutexLock lock(&mu_);
  global_worlds_.erase(global_worlds_.upper_bound(step), global_worlds_.end());
  pending_local_rollback_ = step;
  return Status::OK();
}

Status DistributedState::DropLocalAfterRollback() {
  std::optional<int64_t> step;
  {
    MutexLock lock(&mu_);
    step = pending_local_rollback_;
  }
  if (!step.has_value()) return Status::OK();
  for (Store* store : KeptStores()) {
    TRAINSNAP_RETURN_IF_ERROR(
        DeleteRankSnapshotsAfter(*store, *step).WithContext("dropping this rank's snapshots after the rollback"));
  }
  MutexLock lock(&mu_);
  pending_local_rollback_.reset();
  return Status::OK();
}

Result<int64_t> DistributedState::RestoreLatest(const TrainingState& target) {
  {
    MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
  }
  WaitIdle();
  // Rank 0's global store decides; every rank restores the step it names.
  RankReport mine;
  if (rank() == 0) {
    Result<std::optional<int64_t>> latest = global_->Latest();
    if (!latest.ok()) {
      mine.status = latest.status();
    } else if (!latest->has_value()) {
      mine.status = Status::NotFound("no global step in " + run_dir_);
    } else {
      mine.values[0] = **latest;
    }
  }
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<RankReport> latest, Agree(mine, "restore the latest step"));
  TRAINSNAP_RETURN_IF_ERROR(latest[0].status);
  const int64_t step = latest[0].values[0];
  TRAINSNAP_RETURN_IF_ERROR(Restore(step, target));
  return step;
}

Result<std::vector<int64_t>> DistributedState::Steps() {
  if (global_->read_only()) TRAINSNAP_RETURN_IF_ERROR(global_->Refresh());
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<SnapshotInfo> list, global_->List());
  std::vector<int64_t> steps;
  for (const SnapshotInfo& info : list) steps.push_back(info.step);
  return steps;
}

}  // namespace internal

DistributedCheckpointer::DistributedCheckpointer(std::unique_ptr<internal::DistributedState> state)
    : state_(std::move(state)) {}

DistributedCheckpointer::~DistributedCheckpointer() = default;

Result<std::unique_ptr<DistributedCheckpointer>> DistributedCheckpointer::Open(
    const std::string& run_dir, c10::intrusive_ptr<c10d::ProcessGroup> group, DistributedOptions options) {
  auto state = std::make_unique<internal::DistributedState>(run_dir, std::move(options));
  TRAINSNAP_RETURN_IF_ERROR(state->Open(group));
  return std::unique_ptr<DistributedCheckpointer>(new DistributedCheckpointer(std::move(state)));
}

Result<CaptureHandle> DistributedCheckpointer::CaptureAsync(int64_t step, const TrainingState& state) {
  return state_->CaptureAsync(step, state);
}

Status DistributedCheckpointer::Capture(int64_t step, const TrainingState& state) {
  return state_->Capture(step, state);
}

Status DistributedCheckpointer::Flush() { return state_->Flush(); }

Status DistributedCheckpointer::Restore(int64_t step, const TrainingState& target) {
  return state_->Restore(step, target);
}

Status DistributedCheckpointer::RollbackTo(int64_t step, const TrainingState& target) {
  return state_->Restore(step, target, /*rollback=*/true);
}

Result<int64_t> DistributedCheckpointer::RestoreLatest(const TrainingState& target) {
  return state_->RestoreLatest(target);
}

Result<std::vector<int64_t>> DistributedCheckpointer::Steps() { return state_->Steps(); }

int DistributedCheckpointer::rank() const { return state_->rank(); }
int DistributedCheckpointer::world_size() const { return state_->size(); }

}  // namespace trainsnap
