#include "trainsnap/distributed.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <filesystem>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#define XXH_INLINE_ALL  // header-only: libtrainsnap does not export XXH3
#include <xxhash.h>

#include "capture/pipeline.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "distributed/rank_group.h"
#include "distributed/run_dir.h"
#include "store/kill_point.h"

namespace trainsnap {

namespace internal {

namespace {

// The key of the agreement's Stateful in every rank's TrainingState. A
// restore loads every plain extra in key order, then every tensor_extra in
// key order, after validation and decoding and before any tensor is written.
// The agreement goes in `extra`, or in `tensor_extra` when the state has
// tensor_extra; this key sorts after every other ASCII key, so either way
// it runs once every extra of this rank accepted its bytes.
constexpr char kRankKey[] = "~trainsnap.rank";

// Kill points of the global commit (crash tests; src/store/kill_point.h).
constexpr char kKillBeforeGlobalCommit[] = "dist.before_global_commit";  // every rank committed locally
constexpr char kKillAfterGlobalCommit[] = "dist.after_global_commit";    // global record committed, ranks not told

std::string StepText(int64_t step) { return "step " + std::to_string(step); }

// The steps `policy` drops from `steps` (ascending); never the newest.
std::vector<int64_t> StepsToDrop(const std::vector<int64_t>& steps, const RetentionPolicy& policy) {
  std::vector<int64_t> drop;
  if (policy.keep_last <= 0 || steps.size() <= static_cast<size_t>(policy.keep_last)) return drop;
  const size_t keep_from = steps.size() - static_cast<size_t>(policy.keep_last);
  for (size_t i = 0; i < keep_from; ++i) {
    if (policy.keep_every > 0 && steps[i] % policy.keep_every == 0) continue;
    drop.push_back(steps[i]);
  }
  return drop;
}

// Both maps' keys must sort before kRankKey (see there).
Status CheckExtraKeys(const TrainingState& state) {
  if (state.extra.count(kRankKey) || state.tensor_extra.count(kRankKey)) {
    return Status::InvalidArgument(std::string("extra state `") + kRankKey + "` is reserved for the rank agreement");
  }
  for (const std::string* last : {state.extra.empty() ? nullptr : &state.extra.rbegin()->first,
                                  state.tensor_extra.empty() ? nullptr : &state.tensor_extra.rbegin()->first}) {
    if (last != nullptr && *last > kRankKey) {
      return Status::InvalidArgument("extra state `" + *last + "` sorts after `" + kRankKey +
                                     "`: distributed extra keys must sort before it (plain ASCII names do)");
    }
  }
  return Status::OK();
}

// A Stateful as a tensor_extra without tensors: the rank agreement's place
// when the state has tensor_extra (see kRankKey).
class StatefulAsTensorState final : public TensorStateful {
 public:
  explicit StatefulAsTensorState(Stateful& inner) : inner_(inner) {}
  Status SaveState(TensorState* state) const override {
    *state = TensorState();
    state->type = "trainsnap.rank";
    state->bytes = inner_.SaveState();
    return Status::OK();
  }
  Status LoadState(TensorState state) override { return inner_.LoadState(state.bytes); }

 private:
  Stateful& inner_;
};

// `state` with `agreement` added under kRankKey, in the map that loads last.
TrainingState WithAgreement(const TrainingState& state, Stateful& agreement,
                            std::unique_ptr<StatefulAsTensorState>* holder) {
  TrainingState tagged = state;
  if (state.tensor_extra.empty()) {
    tagged.extra[kRankKey] = &agreement;
  } else {
    *holder = std::make_unique<StatefulAsTensorState>(agreement);
    tagged.tensor_extra[kRankKey] = holder->get();
  }
  return tagged;
}

// A candidate the placement balances over the ranks: model tensors when
// model_replicated, optimizer state when optimizer_replicated.
bool IsReplicated(const PlacementCandidate& candidate, const DistributedOptions& options) {
  const bool model = candidate.role == "param" || candidate.role == "buffer";
  return model ? options.model_replicated : options.optimizer_replicated;
}

uint64_t Mix(uint64_t hash, const void* data, size_t size) {
  return XXH3_64bits_withSeed(data, size, hash);
}

// XXH3 of a tensor's bytes (a contiguous host copy first, when needed).
uint64_t TensorHash(const torch::Tensor& tensor) {
  torch::Tensor host = tensor.detach();
  if (!host.device().is_cpu() || !host.is_contiguous()) host = host.to(torch::kCPU).contiguous();
  return XXH3_64bits(host.data_ptr(), host.nbytes());
}

}  // namespace

// What the placement decided for one capture: read by CaptureAsync once the
// local Checkpointer staged (the placement runs inside its staging).
struct Placed {
  int64_t step = 0;
  // (name, role, bytes) of every replicated tensor, in candidate order: equal
  // on every rank that holds the same replicated state.
  uint64_t fingerprint = 0;
  uint64_t owned_bytes = 0;  // replicated bytes this rank stores
  // verify_replicas: "`name` role R" and the XXH3 of each replicated tensor.
  std::vector<std::string> names;
  std::vector<uint64_t> hashes;
};

// Replicated tensors are written once in all: each goes to one owner rank,
// greedily, largest first (ties by (name, role)), to the rank with the
// fewest bytes so far (ties: the lowest rank). Every rank computes the same
// owners from the same candidates; rank-local tensors stay here.
class ReplicaPlacement final : public TensorPlacement {
 public:
  ReplicaPlacement(const DistributedOptions& options, int rank, int size)
      : options_(options), rank_(rank), size_(size) {}

  Result<std::vector<std::string>> Place(int64_t step, const std::vector<PlacementCandidate>& candidates) override {
    Placed placed;
    placed.step = step;
    std::vector<size_t> replicated;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (IsReplicated(candidates[i], options_)) replicated.push_back(i);
    }
    uint64_t fingerprint = 0;
    for (size_t i : replicated) {
      const PlacementCandidate& c = candidates[i];
      fingerprint = Mix(fingerprint, c.name.data(), c.name.size() + 1);  // with the NUL: "ab"+"c" != "a"+"bc"
      fingerprint = Mix(fingerprint, c.role.data(), c.role.size() + 1);
      fingerprint = Mix(fingerprint, &c.bytes, sizeof(c.bytes));
      if (options_.verify_replicas) {
        placed.names.push_back("`" + c.name + "` role " + c.role);
        placed.hashes.push_back(TensorHash(c.tensor));
      }
    }
    placed.fingerprint = fingerprint;
    std::vector<size_t> order = replicated;
    // Candidates come sorted by (name, role): a stable sort by bytes keeps
    // that order among equal sizes.
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return candidates[a].bytes > candidates[b].bytes; });
    std::vector<uint64_t> load(static_cast<size_t>(size_), 0);
    std::vector<std::string> sources(candidates.size());
    for (size_t i : order) {
      const size_t owner = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      load[owner] += candidates[i].bytes;
      if (static_cast<int>(owner) != rank_) sources[i] = RankStoreName(static_cast<int>(owner));
    }
    placed.owned_bytes = load[static_cast<size_t>(rank_)];
    placed_ = std::move(placed);
    return sources;
  }

  // The decision of the last Place for `step`, moved out.
  std::optional<Placed> Take(int64_t step) {
    if (!placed_.has_value() || placed_->step != step) return std::nullopt;
    std::optional<Placed> out = std::move(placed_);
    placed_.reset();
    return out;
  }

 private:
  const DistributedOptions& options_;
  const int rank_;
  const int size_;
  std::optional<Placed> placed_;  // training thread only
};

// The other ranks' stores of the run, opened read-only on first use for one
// restore (every rank's committer is idle then: nothing writes them).
class RankSources final : public TensorSources {
 public:
  RankSources(std::string run_dir, int size) : run_dir_(std::move(run_dir)), size_(size) {}

  Result<Store*> Source(const std::string& source) override {
    const int rank = ParseRankStoreName(source);
    if (rank < 0 || rank >= size_) {
      return Status::Corruption("the snapshot names source `" + source + "`, no rank store of a run of " +
                                std::to_string(size_) + " ranks");
    }
    std::unique_ptr<Store>& store = stores_[rank];
    if (!store) {
      TRAINSNAP_ASSIGN_OR_RETURN(store, Store::OpenReadOnly(RankStorePath(run_dir_, rank)));
    }
    return store.get();
  }

 private:
  const std::string run_dir_;
  const int size_;
  std::map<int, std::unique_ptr<Store>> stores_;
};

// The Stateful every rank adds under kRankKey. At capture it records which
// rank of how many wrote the snapshot. At restore its LoadState is the
// agreement: reached only once this rank validated, decoded and loaded its
// extras; every rank reports, and the restore goes on only if all succeeded.
class RankAgreement final : public Stateful {
 public:
  RankAgreement(RankGroup& group, int64_t step) : group_(group), step_(step) {}
  // Run on every rank once all agreed, before any tensor is written; its
  // error (the same on every rank: it ends in a collective) aborts the
  // restore everywhere. The rollback's global step.
  void SetAfterAgreement(std::function<Status()> fn) { after_agreement_ = std::move(fn); }

  std::string SaveState() const override {
    return "rank " + std::to_string(group_.rank()) + " of " + std::to_string(group_.size());
  }

  Status LoadState(std::string_view bytes) override {
    // A second call is the undo after a later extra refused: the agreement
    // has nothing to restore, and a collective now would run on this rank
    // alone and pair with the other ranks' next one.
    if (reached_) return Status::OK();
    reached_ = true;
    Status mine;
    if (bytes != SaveState()) {
      mine = Status::ContractMismatch("the store of rank " + std::to_string(group_.rank()) + " holds a snapshot of `" +
                                      std::string(bytes) + "`");
    }
    return Agree(mine);
  }

  // The agreement for a rank that failed before reaching LoadState.
  Status Agree(const Status& mine) {
    reached_ = true;
    Result<std::vector<RankReport>> reports = group_.Agree(RankReport{mine, {}}, "restore " + StepText(step_));
    collective_failed_ = !reports.ok();
    agreed_ = reports.ok() ? FirstFailure(*reports) : reports.status();
    if (agreed_.ok() && after_agreement_) {
      agreed_ = after_agreement_();
      collective_failed_ = agreed_.code() == StatusCode::kAborted && group_.broken();
    }
    return agreed_;
  }

  bool reached() const { return reached_; }
  bool collective_failed() const { return collective_failed_; }
  const Status& agreed() const { return agreed_; }

 private:
  RankGroup& group_;
  const int64_t step_;
  bool reached_ = false;
  bool collective_failed_ = false;
  Status agreed_;
  std::function<Status()> after_agreement_;
};

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
  Status Flush();
  // rollback: also delete every step after `step`, global records first.
  Status Restore(int64_t step, const TrainingState& target, bool rollback = false);
  Result<int64_t> RestoreLatest(const TrainingState& target);
  Result<std::vector<int64_t>> Steps();
  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }

 private:
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
  void WaitIdle() EXCLUDES(mu_);
  Status DropLocalAfterRollback() EXCLUDES(mu_);
  // RankGroup::Agree; a failed collective also marks this checkpointer broken.
  Result<std::vector<RankReport>> Agree(const RankReport& mine, const std::string& what);
  Result<GlobalRecord> ReadGlobalRecord(int64_t step);

  const std::string run_dir_;
  const DistributedOptions options_;
  std::unique_ptr<RankGroup> group_;
  std::unique_ptr<Store> global_;  // rank 0: writable; other ranks: read-only
  std::unique_ptr<Store> local_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<RankAgreement> capture_tag_;  // SaveState only: names the rank in every local snapshot
  std::unique_ptr<ReplicaPlacement> placement_;  // the local Checkpointer's TensorPlacement

  // A leaf lock (docs/code-map.md): never held across a collective, a store
  // call or a Checkpointer call.
  Mutex mu_;
  std::condition_variable cv_;  // queue_ changed or stop_ set
  std::deque<Pending> queue_ GUARDED_BY(mu_);  // front: being committed by the committer thread
  bool stop_ GUARDED_BY(mu_) = false;
  Status flush_error_ GUARDED_BY(mu_);  // first error since the last Flush
  Status broken_ GUARDED_BY(mu_);       // a failed collective: every later call fails with it
  // Global steps, ascending. Written by the committer thread, or by the
  // training thread while the committer is idle (Open, Restore).
  std::vector<int64_t> global_steps_ GUARDED_BY(mu_);
  // A rollback whose deletion of this rank's later snapshots is still due.
  std::optional<int64_t> pending_local_rollback_ GUARDED_BY(mu_);
  std::thread committer_;
};

Status DistributedState::Open(const c10::intrusive_ptr<c10d::ProcessGroup>& user_group) {
  if (!user_group) return Status::InvalidArgument("open " + run_dir_ + ": the process group is null");
  if (options_.timeout.count() <= 0) return Status::InvalidArgument("open " + run_dir_ + ": timeout must be positive");
  std::error_code ec;
  std::filesystem::create_directories(run_dir_, ec);
  if (ec) return Status::IOError("open " + run_dir_ + ": cannot create the run directory: " + ec.message());
  TRAINSNAP_ASSIGN_OR_RETURN(group_, RankGroup::Create(run_dir_, user_group, options_.timeout));
  capture_tag_ = std::make_unique<RankAgreement>(*group_, 0);

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

  // The committer is not started yet: the steps go into global_steps_ once
  // every rank agreed on their count.
  std::vector<int64_t> global_steps;
  mine = [&]() -> Status {
    if (rank() != 0) {
      TRAINSNAP_ASSIGN_OR_RETURN(global_, Store::OpenReadOnly(GlobalStorePath(run_dir_)));
    }
    TRAINSNAP_ASSIGN_OR_RETURN(std::vector<SnapshotInfo> global_list, global_->List());
    for (const SnapshotInfo& info : global_list) global_steps.push_back(info.step);
    StoreOptions local_options = options_.store;
    local_options.retention = RetentionPolicy{};  // applied to global steps by the committer
    TRAINSNAP_ASSIGN_OR_RETURN(local_, Store::Open(RankStorePath(run_dir_, rank()), local_options));
    // Local snapshots of steps that never became global (a crash between the
    // local and the global commit, or a capture another rank failed) are not
    // restorable: delete them, so that their steps may be captured again.
    TRAINSNAP_ASSIGN_OR_RETURN(std::vector<SnapshotInfo> local_list, local_->List());
    const std::set<int64_t> global_set(global_steps.begin(), global_steps.end());
    bool deleted = false;
    for (const SnapshotInfo& info : local_list) {
      if (global_set.count(info.step)) continue;
      TRAINSNAP_RETURN_IF_ERROR(local_->Delete(info.step).WithContext("deleting the local-only " + StepText(info.step)));
      deleted = true;
    }
    // Their chunks go now; a collection that cannot run (e.g. lost commits
    // unacknowledged) leaves them to a later one and fails nothing.
    if (deleted) (void)local_->CollectGarbage();
    return Status::OK();
  }();
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<RankReport> ready,
                             Agree({mine, {static_cast<int64_t>(global_steps.size())}}, "open " + run_dir_));
  TRAINSNAP_RETURN_IF_ERROR(FirstFailure(ready).WithContext("open " + run_dir_));
  for (size_t r = 0; r < ready.size(); ++r) {
    if (ready[r].values[0] != static_cast<int64_t>(global_steps.size())) {
      return Status::Aborted("open " + run_dir_ + ": rank " + std::to_string(r) + " sees " +
                             std::to_string(ready[r].values[0]) + " global steps, rank " + std::to_string(rank()) +
                             " sees " + std::to_string(global_steps.size()) + " (do all ranks share the run directory?)");
    }
  }
  {
    MutexLock lock(&mu_);
    global_steps_ = std::move(global_steps);
  }
  try {
    CheckpointerOptions checkpointer_options = options_.checkpointer;
    if (options_.model_replicated || options_.optimizer_replicated) {
      placement_ = std::make_unique<ReplicaPlacement>(options_, rank(), size());
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
  {
    MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
  }
  Pending pending;
  pending.step = step;
  pending.global = std::make_shared<CaptureState>(step);
  pending.staged = CheckExtraKeys(state).WithContext("capture " + StepText(step));
  if (pending.staged.ok()) pending.staged = DropLocalAfterRollback().WithContext("capture " + StepText(step));
  if (pending.staged.ok()) {
    std::unique_ptr<StatefulAsTensorState> holder;
    TrainingState tagged = WithAgreement(state, *capture_tag_, &holder);
    Result<CaptureHandle> local = checkpointer_->CaptureAsync(step, tagged);
    if (placement_) pending.placed = placement_->Take(step);
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
      (void)pending.local.Wait();  // its local snapshot stays; Open decides its fate
      outcome = broken;
    } else {
      outcome = CommitGlobally(pending);
    }
    pending.global->Finish(outcome);
    MutexLock lock(&mu_);
    // The staging error was counted by CaptureAsync already.
    if (!outcome.ok() && pending.staged.ok() && flush_error_.ok()) flush_error_ = outcome;
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
  mine.values[0] = step;
  if (mine.status.ok()) {
    Result<SnapshotInfo> info = local_->Info(step);
    if (info.ok()) {
      mine.values[1] = static_cast<int64_t>(info->logical_bytes);
      mine.values[2] = static_cast<int64_t>(info->stored_bytes);
      mine.values[3] = static_cast<int64_t>(info->new_bytes);
    } else {
      mine.status = info.status();
    }
  }
  const bool local_committed = pending.staged.ok() && mine.status.ok();
  if (pending.placed.has_value()) mine.values[4] = static_cast<int64_t>(pending.placed->fingerprint);
  mine.values[5] = options_.verify_replicas ? 1 : 0;
  // Phase 2: agree on every rank's outcome.
  Result<std::vector<RankReport>> reports = Agree(mine, what);
  if (!reports.ok()) return reports.status();
  Status agreed = FirstFailure(*reports);
  for (size_t r = 0; agreed.ok() && r < reports->size(); ++r) {
    if ((*reports)[r].values[0] != step) {
      agreed = Status::InvalidArgument("ranks disagree on the step: rank " + std::to_string(rank()) + " captures " +
                                       std::to_string(step) + ", rank " + std::to_string(r) + " captures " +
                                       std::to_string((*reports)[r].values[0]));
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
    global_steps_.push_back(step);
    drop = StepsToDrop(global_steps_, options_.store.retention);
    drop.resize(std::min(drop.size(), static_cast<size_t>(std::max<int64_t>(0, (*told)[0].values[0]))));
    for (int64_t gone : drop) global_steps_.erase(std::find(global_steps_.begin(), global_steps_.end(), gone));
  }
  bool deleted = false;
  for (int64_t gone : drop) deleted = local_->Delete(gone).ok() || deleted;
  if (deleted) (void)local_->CollectGarbage();  // as a store's own retention: failures are retried next time
  return Status::OK();
}

Status DistributedState::CheckReplicas(const Pending& pending, const std::vector<RankReport>& reports,
                                       const std::string& what) {
  for (size_t r = 1; r < reports.size(); ++r) {
    if (reports[r].values[5] != reports[0].values[5]) {
      return Status::InvalidArgument("verify_replicas is " + std::string(reports[0].values[5] ? "on" : "off") +
                                     " on rank 0, " + (reports[r].values[5] ? "on" : "off") + " on rank " +
                                     std::to_string(r));
    }
    if (reports[r].values[4] != reports[0].values[4]) {
      return Status::InvalidArgument("the ranks hold different replicated tensors (names, roles or sizes): rank " +
                                     std::to_string(r) + " differs from rank 0");
    }
  }
  if (reports[0].values[5] == 0) return Status::OK();
  // Every rank's hashes, in candidate order (the same tensors everywhere:
  // the fingerprints agree).
  const std::vector<uint64_t> none;
  const std::vector<uint64_t>& hashes = pending.placed.has_value() ? pending.placed->hashes : none;
  std::string mine(reinterpret_cast<const char*>(hashes.data()), hashes.size() * sizeof(uint64_t));
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<std::string> all, group_->AllGather(mine, what + ": replica hashes"));
  for (size_t i = 0; i < hashes.size(); ++i) {
    std::vector<int> differ;
    uint64_t first = 0;
    for (size_t r = 0; r < all.size(); ++r) {
      uint64_t hash = 0;
      if (all[r].size() != mine.size()) return Status::InvalidArgument("replica hashes of another size on rank " +
                                                                      std::to_string(r));
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
    record.ranks.push_back(RankFigures{static_cast<uint64_t>(report.values[1]),
                                       static_cast<uint64_t>(report.values[2]),
                                       static_cast<uint64_t>(report.values[3])});
  }
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<SnapshotWriter> writer, global_->BeginSnapshot(step));
  writer->SetManifest(EncodeGlobalRecord(record));
  TRAINSNAP_RETURN_IF_ERROR(writer->Commit().status().WithContext("global record"));
  // Retention: the global records go first, so that a crash in between leaves
  // local snapshots of non-global steps (deleted by the next Open), never a
  // global step that a rank lacks.
  std::vector<int64_t> steps;
  {
    MutexLock lock(&mu_);
    steps = global_steps_;
  }
  steps.push_back(step);
  int64_t dropped = 0;
  for (int64_t gone : StepsToDrop(steps, options_.store.retention)) {
    // A failed delete leaves this and later drops for the next commit's
    // retention; the step itself is committed either way.
    if (!global_->Delete(gone).ok()) break;
    ++dropped;
  }
  return dropped;
}

Result<std::vector<RankReport>> DistributedState::Agree(const RankReport& mine, const std::string& what) {
  Result<std::vector<RankReport>> reports = group_->Agree(mine, what);
  if (!reports.ok()) {
    MutexLock lock(&mu_);
    broken_ = reports.status();
  }
  return reports;
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

Status DistributedState::Restore(int64_t step, const TrainingState& target, bool rollback) {
  const std::string what = "restore " + StepText(step);
  {
    MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
  }
  WaitIdle();  // the committer is idle from here: the collectives below are the only ones
  // 1. The global record: the step is global, and this group fits it.
  RankReport pre;
  pre.values[0] = step;
  pre.status = [&]() -> Status {
    TRAINSNAP_RETURN_IF_ERROR(CheckExtraKeys(target));
    TRAINSNAP_ASSIGN_OR_RETURN(GlobalRecord record, ReadGlobalRecord(step));
    if (record.world_size != size()) {
      return Status::ContractMismatch("world size: " + StepText(step) + " was captured by " +
                                      std::to_string(record.world_size) + " ranks, this group has " +
                                      std::to_string(size()));
    }
    if (record.optimizer_replicated != options_.optimizer_replicated) {
      return Status::ContractMismatch(std::string("optimizer layout: ") + StepText(step) + " was captured with " +
                                      (record.optimizer_replicated ? "a replicated" : "a sharded") +
                                      " optimizer, DistributedOptions::optimizer_replicated is " +
                                      (options_.optimizer_replicated ? "true" : "false"));
    }
    return Status::OK();
  }().WithContext(what);
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<RankReport> checked, Agree(pre, what));
  TRAINSNAP_RETURN_IF_ERROR(FirstFailure(checked));
  for (size_t r = 0; r < checked.size(); ++r) {
    if (checked[r].values[0] != step) {
      return Status::InvalidArgument(what + ": ranks disagree on the step: rank " + std::to_string(r) +
                                     " restores " + std::to_string(checked[r].values[0]));
    }
  }
  // 2. Every rank validates and decodes; the agreement (the extra under
  // kRankKey) decides whether any rank applies.
  RankAgreement agreement(*group_, step);
  if (rollback) {
    agreement.SetAfterAgreement([&]() -> Status {
      // Rank 0 deletes the later global records (one transaction), then
      // every rank learns how that went; only then may a rank drop its own.
      Status global;
      if (rank() == 0) global = global_->Rollback(step).WithContext("global store");
      Result<std::vector<RankReport>> told = group_->Agree({global, {}}, "roll back to " + StepText(step));
      if (!told.ok()) return told.status();
      TRAINSNAP_RETURN_IF_ERROR(FirstFailure(*told));
      MutexLock lock(&mu_);
      global_steps_.erase(std::upper_bound(global_steps_.begin(), global_steps_.end(), step), global_steps_.end());
      pending_local_rollback_ = step;
      return Status::OK();
    });
  }
  std::unique_ptr<StatefulAsTensorState> holder;
  TrainingState tagged = WithAgreement(target, agreement, &holder);
  RankSources sources(run_dir_, size());  // the replicated tensors other ranks stored
  RestoreOptions restore_options;
  restore_options.sources = &sources;
  Status local = checkpointer_->Restore(step, tagged, restore_options);
  if (!agreement.reached()) (void)agreement.Agree(local.ok() ? Status::Aborted("the rank agreement did not run")
                                                             : local);
  if (agreement.collective_failed()) {
    MutexLock lock(&mu_);
    broken_ = agreement.agreed();
  }
  // The same status on every rank: the lowest failing rank's, which already
  // names the step (or the failed collective).
  if (!agreement.agreed().ok()) return agreement.agreed();
  // The later steps are no longer global; this rank's snapshots of them go
  // now, or (should that fail) before its next capture, or at the next Open.
  if (rollback) (void)DropLocalAfterRollback();
  return local;
}

Status DistributedState::DropLocalAfterRollback() {
  std::optional<int64_t> step;
  {
    MutexLock lock(&mu_);
    step = pending_local_rollback_;
  }
  if (!step.has_value()) return Status::OK();
  TRAINSNAP_RETURN_IF_ERROR(local_->Rollback(*step).WithContext("dropping this rank's snapshots after the rollback"));
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
  TRAINSNAP_ASSIGN_OR_RETURN(CaptureHandle handle, state_->CaptureAsync(step, state));
  return handle.Wait();
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
