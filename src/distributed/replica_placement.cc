#include "distributed/replica_placement.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <condition_variable>
#include <mutex>

#define XXH_INLINE_ALL  // header-only: libtrainsnap does not export XXH3
#include <xxhash.h>

#include "distributed/run_dir.h"
#include "torch/exception_boundary.h"

namespace trainsnap::internal {

namespace {

uint64_t Mix(uint64_t hash, const void* data, size_t size) { return XXH3_64bits_withSeed(data, size, hash); }

}  // namespace

std::vector<int> AssignOwners(const std::vector<uint64_t>& bytes, int ranks) {
  std::vector<size_t> order(bytes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
  std::vector<uint64_t> load(static_cast<size_t>(std::max(ranks, 1)), 0);
  std::vector<int> owners(bytes.size(), 0);
  for (size_t i : order) {
    const size_t owner = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[owner] += bytes[i];
    owners[i] = static_cast<int>(owner);
  }
  return owners;
}

uint64_t SampleStride(uint64_t bytes, int replica_check_stride) {
  const uint64_t most = static_cast<uint64_t>(std::max(replica_check_stride, 1));
  return std::clamp<uint64_t>(bytes / kReplicaMinSampleBytes, 1, most);
}

uint64_t SampleOffset(int64_t step, uint64_t stride) {
  return stride <= 1 ? 0 : XXH3_64bits(&step, sizeof(step)) % stride;
}

uint64_t BlockHash(const void* data, size_t size) { return XXH3_64bits(data, size); }

uint64_t CombineBlockHashes(const std::vector<uint64_t>& blocks, uint64_t size) {
  return XXH3_64bits_withSeed(blocks.data(), blocks.size() * sizeof(uint64_t), size);
}

// The hashes of one capture's replicated tensors, computed by the pool's
// threads and by the thread that waits for them (a sample smaller than
// kReplicaParallelHashBytes by that thread alone; Wait takes tasks too: on
// an oversubscribed machine a worker may be scheduled only milliseconds
// later, and the training thread would wait for it with nothing left to
// do). A task is a sampled block of a contiguous host tensor, or another
// tensor (on a device, or a view that is not contiguous), which the thread
// makes contiguous, copying its sampled blocks to the host. Shared with the
// workers: one that starts after the last task finds none and lets go.
class ReplicaPlacement::Hashing {
 public:
  static std::shared_ptr<Hashing> Start(boost::asio::thread_pool& pool, int threads, std::vector<torch::Tensor> tensors,
                                        int64_t step, int check_stride) {
    auto hashing = std::shared_ptr<Hashing>(new Hashing(std::move(tensors), step, check_stride));
    // A small sample is hashed by the waiting thread alone: on a machine
    // with fewer cores than threads, each woken worker is one more thread
    // the training thread shares a core with while it copies, for a
    // fraction of a millisecond of hashing.
    if (hashing->hashed_bytes_ < kReplicaParallelHashBytes) return hashing;
    const size_t tasks = hashing->blocks_.size() + hashing->others_.size();
    const size_t workers = std::min(static_cast<size_t>(std::max(threads, 1)), tasks);
    for (size_t i = 0; i < workers; ++i) {
      boost::asio::post(pool, [hashing] { hashing->Work(); });
    }
    return hashing;
  }

 private:
  Hashing(std::vector<torch::Tensor> tensors, int64_t step, int check_stride)
      : tensors_(std::move(tensors)), block_hashes_(tensors_.size()) {
    uint64_t bytes = 0;
    for (const torch::Tensor& tensor : tensors_) bytes += Bytes(tensor);
    const uint64_t stride = SampleStride(bytes, check_stride);
    const uint64_t offset = SampleOffset(step, stride);
    uint64_t first = 0;  // the global number of each tensor's first block
    for (size_t t = 0; t < tensors_.size(); ++t) {
      const torch::Tensor& tensor = tensors_[t];
      const uint64_t count = BlockCount(tensor);
      // Its first sampled block: the least b >= first with b % stride == offset.
      const uint64_t skip = (offset + stride - first % stride) % stride;
      std::vector<size_t> sampled;
      for (uint64_t b = skip; b < count; b += stride) {
        sampled.push_back(static_cast<size_t>(b));
        hashed_bytes_ += BlockSize(tensor, static_cast<size_t>(b));
      }
      first += count;
      block_hashes_[t].resize(sampled.size());
      if (sampled.empty()) continue;
      if (tensor.device().is_cpu() && tensor.is_contiguous()) {
        for (size_t i = 0; i < sampled.size(); ++i) blocks_.push_back({t, i, sampled[i]});
      } else {
        others_.push_back({t, std::move(sampled)});
      }
    }
    tasks_ = blocks_.size() + others_.size();
  }

 public:
  uint64_t hashed_bytes() const { return hashed_bytes_; }

  // Hashes what no worker has taken yet, then waits for the tasks in flight;
  // every hash, one per tensor.
  Result<std::vector<uint64_t>> Wait() {
    Work();
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return done_ == tasks_; });
      if (!error_.ok()) return error_;
    }
    std::vector<uint64_t> hashes(tensors_.size());
    for (size_t t = 0; t < tensors_.size(); ++t) {
      const torch::Tensor& tensor = tensors_[t];
      hashes[t] = CombineBlockHashes(block_hashes_[t], Bytes(tensor));
    }
    return hashes;
  }

 private:
  struct Block {
    size_t tensor;
    size_t slot;   // in block_hashes_[tensor]
    size_t block;  // in the tensor
  };
  struct Other {
    size_t tensor;
    std::vector<size_t> blocks;  // sampled, ascending
  };

  static uint64_t Bytes(const torch::Tensor& tensor) {
    return tensor.defined() ? static_cast<uint64_t>(tensor.nbytes()) : 0;
  }
  static uint64_t BlockCount(const torch::Tensor& tensor) {
    return (Bytes(tensor) + kReplicaHashBlock - 1) / kReplicaHashBlock;
  }
  static size_t BlockSize(const torch::Tensor& tensor, size_t block) {
    return std::min(kReplicaHashBlock, tensor.nbytes() - block * kReplicaHashBlock);
  }

  // Takes tasks until none is left.
  void Work() {
    for (size_t o = next_other_++; o < others_.size(); o = next_other_++) {
      Finish(ExceptionBoundary([&] { return HashOther(others_[o]); }));
    }
    for (size_t i = next_block_++; i < blocks_.size(); i = next_block_++) {
      const Block& block = blocks_[i];
      const torch::Tensor& tensor = tensors_[block.tensor];
      const auto* data = static_cast<const uint8_t*>(tensor.data_ptr()) + block.block * kReplicaHashBlock;
      block_hashes_[block.tensor][block.slot] = BlockHash(data, BlockSize(tensor, block.block));
      Finish(Status::OK());
    }
  }

  Status HashOther(const Other& other) {
    const torch::Tensor& tensor = tensors_[other.tensor];
    // Blocks are whole elements: every element size divides kReplicaHashBlock.
    const int64_t element = static_cast<int64_t>(tensor.element_size());
    const torch::Tensor flat = tensor.detach().contiguous().reshape({-1});
    for (size_t i = 0; i < other.blocks.size(); ++i) {
      const size_t b = other.blocks[i];
      const int64_t at = static_cast<int64_t>(b * kReplicaHashBlock) / element;
      const int64_t count = static_cast<int64_t>(BlockSize(tensor, b)) / element;
      const torch::Tensor host = flat.narrow(0, at, count).to(torch::kCPU).contiguous();
      block_hashes_[other.tensor][i] = BlockHash(host.data_ptr(), host.nbytes());
    }
    return Status::OK();
  }

  void Finish(const Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!status.ok() && error_.ok()) error_ = status.WithContext("hashing the replicated tensors");
    if (++done_ == tasks_) cv_.notify_all();
  }

  const std::vector<torch::Tensor> tensors_;         // keeps them alive while hashed
  std::vector<std::vector<uint64_t>> block_hashes_;  // by tensor, its sampled blocks'; each written by one thread
  std::vector<Block> blocks_;                        // of contiguous host tensors
  std::vector<Other> others_;                        // the other tensors
  uint64_t hashed_bytes_ = 0;
  std::atomic<size_t> next_block_{0};
  std::atomic<size_t> next_other_{0};
  size_t tasks_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t done_ = 0;  // tasks finished (mu_)
  Status error_;     // mu_
};

ReplicaPlacement::ReplicaPlacement(bool model_replicated, bool optimizer_replicated, bool verify, int rank, int ranks,
                                   int hash_threads, int check_stride)
    : model_replicated_(model_replicated),
      optimizer_replicated_(optimizer_replicated),
      verify_(verify),
      rank_(rank),
      ranks_(ranks),
      hash_threads_(std::max(hash_threads, 1)),
      check_stride_(std::max(check_stride, 1)) {
  if (verify_) pool_ = std::make_unique<boost::asio::thread_pool>(static_cast<size_t>(hash_threads_));
}

ReplicaPlacement::~ReplicaPlacement() {
  WaitForHashing();  // its tasks in flight read the tensors it holds
  if (pool_ != nullptr) pool_->join();
}

void ReplicaPlacement::WaitForHashing() {
  if (hashing_ == nullptr) return;
  (void)hashing_->Wait();
  hashing_.reset();
}

bool ReplicaPlacement::IsReplicatedRole(const std::string& role, bool model_replicated, bool optimizer_replicated) {
  const bool model = role == "param" || role == "buffer";
  return model ? model_replicated : optimizer_replicated;
}

Result<std::vector<std::string>> ReplicaPlacement::Place(int64_t step,
                                                         const std::vector<PlacementCandidate>& candidates) {
  WaitForHashing();  // of a capture whose Take never came (it failed before):
                     // its hashes are not needed, its reads must end
  Placed placed;
  placed.step = step;
  std::vector<size_t> replicated;
  std::vector<uint64_t> bytes;
  std::vector<torch::Tensor> to_hash;
  uint64_t fingerprint = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const PlacementCandidate& c = candidates[i];
    if (!IsReplicatedRole(c.role, model_replicated_, optimizer_replicated_)) continue;
    replicated.push_back(i);
    bytes.push_back(c.bytes);
    fingerprint = Mix(fingerprint, c.name.data(),
                      c.name.size() + 1);  // with the NUL: "ab"+"c" != "a"+"bc"
    fingerprint = Mix(fingerprint, c.role.data(), c.role.size() + 1);
    fingerprint = Mix(fingerprint, &c.bytes, sizeof(c.bytes));
    if (verify_) {
      placed.names.push_back("`" + c.name + "` role " + c.role);
      to_hash.push_back(c.tensor);
    }
  }
  placed.fingerprint = fingerprint;
  // Candidates come sorted by (name, role): equal sizes keep that order.
  const std::vector<int> owners = AssignOwners(bytes, ranks_);
  std::vector<std::string> sources(candidates.size());
  for (size_t j = 0; j < replicated.size(); ++j) {
    if (owners[j] == rank_) {
      placed.owned_bytes += bytes[j];
    } else {
      sources[replicated[j]] = RankStoreName(owners[j]);
    }
  }
  if (verify_) hashing_ = Hashing::Start(*pool_, hash_threads_, std::move(to_hash), step, check_stride_);
  placed_ = std::move(placed);
  return sources;
}

Result<std::optional<Placed>> ReplicaPlacement::Take(int64_t step) {
  if (!placed_.has_value() || placed_->step != step) return std::optional<Placed>();
  std::optional<Placed> out = std::move(placed_);
  placed_.reset();
  if (hashing_ != nullptr) {
    Result<std::vector<uint64_t>> hashes = hashing_->Wait();
    out->hashed_bytes = hashing_->hashed_bytes();
    hashing_.reset();
    if (!hashes.ok()) return hashes.status();
    out->hashes = std::move(hashes).value();
  }
  return out;
}

}  // namespace trainsnap::internal
