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

uint64_t PieceHash(const void* data, size_t size) { return XXH3_64bits(data, size); }

uint64_t CombinePieceHashes(const std::vector<uint64_t>& pieces, uint64_t size) {
  return XXH3_64bits_withSeed(pieces.data(), pieces.size() * sizeof(uint64_t), size);
}

// The hashes of one capture's replicated tensors, computed by the pool's
// threads: contiguous host tensors are cut into pieces shared among them;
// the others (device tensors, non-contiguous views) are copied to the host
// by one thread each first.
class ReplicaPlacement::Hashing {
 public:
  Hashing(boost::asio::thread_pool& pool, int threads, std::vector<torch::Tensor> tensors)
      : tensors_(std::move(tensors)), first_piece_(tensors_.size() + 1, 0), other_hashes_(tensors_.size()) {
    for (size_t t = 0; t < tensors_.size(); ++t) {
      first_piece_[t] = pieces_.size();
      const torch::Tensor& tensor = tensors_[t];
      if (!tensor.defined() || tensor.numel() == 0) continue;
      if (!tensor.device().is_cpu() || !tensor.is_contiguous()) {
        others_.push_back(t);
        continue;
      }
      const auto* data = static_cast<const uint8_t*>(tensor.data_ptr());
      const size_t size = tensor.nbytes();
      for (size_t at = 0; at < size; at += kReplicaHashPiece) {
        pieces_.push_back({data + at, std::min(kReplicaHashPiece, size - at)});
      }
    }
    first_piece_[tensors_.size()] = pieces_.size();
    piece_hashes_.resize(pieces_.size());
    const int workers = static_cast<int>(std::min<size_t>(static_cast<size_t>(std::max(threads, 1)),
                                                          std::max<size_t>(1, pieces_.size() + others_.size())));
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = workers;  // before the first worker can finish
    }
    for (int i = 0; i < workers; ++i) boost::asio::post(pool, [this] { Work(); });
  }
  ~Hashing() { (void)Wait(); }

  // Waits for every hash; one per tensor.
  Result<std::vector<uint64_t>> Wait() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return running_ == 0; });
      if (!error_.ok()) return error_;
    }
    std::vector<uint64_t> hashes(tensors_.size());
    for (size_t t = 0; t < tensors_.size(); ++t) {
      const torch::Tensor& tensor = tensors_[t];
      const uint64_t size = tensor.defined() ? static_cast<uint64_t>(tensor.nbytes()) : 0;
      if (!other_hashes_[t].empty()) {
        hashes[t] = CombinePieceHashes(other_hashes_[t], size);
        continue;
      }
      std::vector<uint64_t> pieces(piece_hashes_.begin() + static_cast<std::ptrdiff_t>(first_piece_[t]),
                                   piece_hashes_.begin() + static_cast<std::ptrdiff_t>(first_piece_[t + 1]));
      hashes[t] = CombinePieceHashes(pieces, size);
    }
    return hashes;
  }

 private:
  struct Piece {
    const uint8_t* data;
    size_t size;
  };

  void Work() {
    Status status = ExceptionBoundary([&] {
      for (size_t o = next_other_++; o < others_.size(); o = next_other_++) {
        const size_t t = others_[o];
        torch::Tensor host = tensors_[t].detach().to(torch::kCPU).contiguous();
        const auto* data = static_cast<const uint8_t*>(host.data_ptr());
        std::vector<uint64_t>& out = other_hashes_[t];
        for (size_t at = 0; at < host.nbytes(); at += kReplicaHashPiece) {
          out.push_back(PieceHash(data + at, std::min(kReplicaHashPiece, host.nbytes() - at)));
        }
      }
      for (size_t i = next_piece_++; i < pieces_.size(); i = next_piece_++) {
        piece_hashes_[i] = PieceHash(pieces_[i].data, pieces_[i].size);
      }
      return Status::OK();
    });
    std::lock_guard<std::mutex> lock(mu_);
    if (!status.ok() && error_.ok()) error_ = status.WithContext("hashing the replicated tensors");
    if (--running_ == 0) cv_.notify_all();
  }

  const std::vector<torch::Tensor> tensors_;  // keeps them alive while hashed
  std::vector<size_t> first_piece_;           // tensor t's pieces: [first_piece_[t], first_piece_[t + 1])
  std::vector<Piece> pieces_;
  std::vector<uint64_t> piece_hashes_;               // by piece, each written by one thread
  std::vector<size_t> others_;                       // tensors copied to the host first
  std::vector<std::vector<uint64_t>> other_hashes_;  // their piece hashes, by tensor
  std::atomic<size_t> next_piece_{0};
  std::atomic<size_t> next_other_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  int running_ = 0;  // workers not finished (mu_)
  Status error_;     // mu_
};

ReplicaPlacement::ReplicaPlacement(bool model_replicated, bool optimizer_replicated, bool verify, int rank, int ranks,
                                   int hash_threads)
    : model_replicated_(model_replicated),
      optimizer_replicated_(optimizer_replicated),
      verify_(verify),
      rank_(rank),
      ranks_(ranks),
      hash_threads_(std::max(hash_threads, 1)) {
  if (verify_) pool_ = std::make_unique<boost::asio::thread_pool>(static_cast<size_t>(hash_threads_));
}

ReplicaPlacement::~ReplicaPlacement() {
  hashing_.reset();  // waits for its workers before the pool joins its threads
  if (pool_ != nullptr) pool_->join();
}

bool ReplicaPlacement::IsReplicatedRole(const std::string& role, bool model_replicated, bool optimizer_replicated) {
  const bool model = role == "param" || role == "buffer";
  return model ? model_replicated : optimizer_replicated;
}

Result<std::vector<std::string>> ReplicaPlacement::Place(int64_t step,
                                                         const std::vector<PlacementCandidate>& candidates) {
  hashing_.reset();  // a capture whose Take never came (it failed before): its
                     // hashes are not needed
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
  if (verify_) hashing_ = std::make_unique<Hashing>(*pool_, hash_threads_, std::move(to_hash));
  placed_ = std::move(placed);
  return sources;
}

Result<std::optional<Placed>> ReplicaPlacement::Take(int64_t step) {
  if (!placed_.has_value() || placed_->step != step) return std::optional<Placed>();
  std::optional<Placed> out = std::move(placed_);
  placed_.reset();
  if (hashing_ != nullptr) {
    Result<std::vector<uint64_t>> hashes = hashing_->Wait();
    hashing_.reset();
    if (!hashes.ok()) return hashes.status();
    out->hashes = std::move(hashes).value();
  }
  return out;
}

}  // namespace trainsnap::internal
