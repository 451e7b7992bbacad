#include "trainsnap/sampler.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>
#include <torch/serialize/archive.h>

namespace trainsnap {

namespace {

// SaveState's format: six little-endian 64-bit fields (this build runs on
// little-endian hosts only, like the store's chunk format).
constexpr uint64_t kFormatVersion = 1;
constexpr size_t kFields = 6;  // version, size, seed, shuffle, epoch, consumed (the global position)
constexpr size_t kStateBytes = kFields * sizeof(uint64_t);
constexpr const char* kArchiveKey = "trainsnap_resumable_sampler";

// SplitMix64 finalizer (Steele et al., "Fast splittable pseudorandom number
// generators", 2014): decorrelates the per-epoch seeds of nearby epochs.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

struct ResumableSampler::Shared {
  std::mutex mu;
  size_t size = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  size_t rank = 0;  // distributed mode: this rank of `world`
  size_t world = 1;
  int64_t epoch = 0;
  size_t start = 0;            // the global position this rank's pass of `epoch` started at
  size_t taken = 0;            // samples of the pass the loop took (BatchConsumed)
  size_t handed_out = 0;       // samples of the pass given to the loader
  std::deque<size_t> pending;  // sizes of the batches handed out, not yet consumed
  bool started = false;        // reset() ran, or a state was loaded
  bool resume = false;         // the next reset() resumes `epoch` at `start`
  std::vector<int64_t> order;  // the permutation of `epoch`, when shuffling

  // The global position: every rank took `taken` samples since `start`.
  size_t Position() const { return start + taken * world; }  // requires mu

  // Samples of the pass from `start`: the tail of fewer than `world` is
  // dropped.
  size_t PassLength() const { return size > start ? (size - start) / world : 0; }  // requires mu

  // A loaded position with fewer samples left than ranks resumes at the start
  // of the next epoch.
  void SettleResume() {  // requires mu
    if (!resume || PassLength() > 0) return;
    ++epoch;
    start = 0;
  }

  void Begin() {  // requires mu
    pending.clear();
    handed_out = taken;
    order.clear();
    if (!shuffle) return;
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(Mix(seed ^ Mix(static_cast<uint64_t>(epoch))));
    torch::Tensor perm = torch::randperm(static_cast<int64_t>(size), gen, torch::kInt64);
    order.assign(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + size);
  }
};

ResumableSampler::ResumableSampler(size_t size, uint64_t seed, bool shuffle) : shared_(std::make_shared<Shared>()) {
  shared_->size = size;
  shared_->seed = seed;
  shared_->shuffle = shuffle;
}

Status ResumableSampler::Distribute(int rank, int world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return Status::InvalidArgument("resumable sampler: rank " + std::to_string(rank) + " of " +
                                   std::to_string(world_size) + " ranks");
  }
  Shared& s = *shared_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.handed_out > s.taken || !s.pending.empty() || (s.started && !s.resume && s.taken > 0)) {
    return Status::InvalidArgument(
        "resumable sampler: Distribute() while a pass is under way (call it before the loader starts, or after "
        "LoadState)");
  }
  s.rank = static_cast<size_t>(rank);
  s.world = static_cast<size_t>(world_size);
  s.SettleResume();
  return Status::OK();
}

void ResumableSampler::reset(torch::optional<size_t> new_size) {
  Shared& s = *shared_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (new_size.has_value()) s.size = *new_size;
  if (s.resume) {
    s.SettleResume();
    s.resume = false;
  } else {
    if (s.started) ++s.epoch;
    s.start = 0;
  }
  s.taken = 0;
  s.started = true;
  s.start = std::min(s.start, s.size);
  s.Begin();
}

torch::optional<std::vector<size_t>> ResumableSampler::next(size_t batch_size) {
  Shared& s = *shared_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.started) {  // a loader that did not call reset() first: behave as its first epoch
    s.started = true;
    s.Begin();
  }
  const size_t length = s.PassLength();
  if (s.handed_out >= length || batch_size == 0) return torch::nullopt;
  const size_t n = std::min(batch_size, length - s.handed_out);
  std::vector<size_t> indices(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t at = s.start + s.rank + (s.handed_out + i) * s.world;
    indices[i] = s.shuffle ? static_cast<size_t>(s.order[at]) : at;
  }
  s.handed_out += n;
  s.pending.push_back(n);
  return indices;
}

Status ResumableSampler::BatchConsumed() {
  Shared& s = *shared_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.pending.empty()) {
    return Status::InvalidArgument("resumable sampler: BatchConsumed() without a batch handed out to the loader");
  }
  s.taken += s.pending.front();
  s.pending.pop_front();
  return Status::OK();
}

std::string ResumableSampler::SaveState() const {
  Shared& s = *shared_;
  std::lock_guard<std::mutex> lock(s.mu);
  const uint64_t fields[kFields] = {kFormatVersion, s.size, s.seed, s.shuffle ? 1u : 0u, static_cast<uint64_t>(s.epoch),
                                    s.Position()};
  std::string bytes(kStateBytes, '\0');
  std::memcpy(bytes.data(), fields, kStateBytes);
  return bytes;
}

Status ResumableSampler::LoadState(std::string_view bytes) {
  if (bytes.size() != kStateBytes) {
    return Status::InvalidArgument("resumable sampler: state of " + std::to_string(bytes.size()) + " bytes, expected " +
                                   std::to_string(kStateBytes));
  }
  uint64_t fields[kFields];
  std::memcpy(fields, bytes.data(), kStateBytes);
  const uint64_t version = fields[0], size = fields[1], seed = fields[2], shuffle = fields[3], epoch = fields[4],
                 consumed = fields[5];
  if (version != kFormatVersion) {
    return Status::InvalidArgument("resumable sampler: state format " + std::to_string(version) + ", expected " +
                                   std::to_string(kFormatVersion));
  }
  Shared& s = *shared_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (size != s.size) {
    return Status::InvalidArgument("resumable sampler: state for a dataset of " + std::to_string(size) +
                                   " samples, this sampler has " + std::to_string(s.size));
  }
  if (shuffle > 1 || consumed > size || epoch >= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Status::InvalidArgument("resumable sampler: state out of range (shuffle " + std::to_string(shuffle) +
                                   ", epoch " + std::to_string(epoch) + ", consumed " + std::to_string(consumed) + ")");
  }
  s.seed = seed;
  s.shuffle = shuffle == 1;
  s.epoch = static_cast<int64_t>(epoch);
  s.start = static_cast<size_t>(consumed);
  s.taken = 0;
  s.started = true;
  s.resume = true;
  s.SettleResume();
  s.pending.clear();
  s.handed_out = 0;
  return Status::OK();
}

void ResumableSampler::save(torch::serialize::OutputArchive& archive) const {
  const std::string bytes = SaveState();
  torch::Tensor tensor = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(tensor.data_ptr(), bytes.data(), bytes.size());
  archive.write(kArchiveKey, tensor, /*is_buffer=*/true);
}

void ResumableSampler::load(torch::serialize::InputArchive& archive) {
  torch::Tensor tensor;
  archive.read(kArchiveKey, tensor, /*is_buffer=*/true);
  tensor = tensor.contiguous();
  Status status =
      LoadState(std::string_view(static_cast<const char*>(tensor.data_ptr()), static_cast<size_t>(tensor.nbytes())));
  TORCH_CHECK(status.ok(), status.ToString());
}

int64_t ResumableSampler::epoch() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->epoch;
}

size_t ResumableSampler::consumed() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->Position();
}

}  // namespace trainsnap
