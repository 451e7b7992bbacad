// ResumableSampler with LibTorch's DataLoader: shuffled epochs that do not
// touch the default generator, and a loader dropped mid-epoch or at an epoch
// boundary, with batches prefetched by its workers, that resumes in a fresh
// sampler and loader at the exact next sample, bit for bit.
#include "trainsnap/sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <sstream>
#include <vector>

namespace trainsnap {
namespace {

constexpr size_t kSamples = 50;
constexpr size_t kBatch = 8;  // 7 batches per epoch, the last one of 2 samples
constexpr size_t kBatchesPerEpoch = (kSamples + kBatch - 1) / kBatch;
constexpr int64_t kEpochs = 3;
constexpr uint64_t kSeed = 1234;

// Sample i: three floats drawn from a generator seeded with i, and i itself.
class IndexedDataset : public torch::data::datasets::Dataset<IndexedDataset> {
 public:
  torch::data::Example<> get(size_t index) override {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(1000 + index);
    return {torch::randn({3}, gen), torch::scalar_tensor(static_cast<int64_t>(index), torch::kInt64)};
  }
  torch::optional<size_t> size() const override { return kSamples; }
};

// The batches a run saw, in order.
struct Seen {
  std::vector<int64_t> ids;
  std::vector<torch::Tensor> data;
  void Add(const torch::data::Example<>& batch) {
    for (int64_t i = 0; i < batch.target.size(0); ++i) ids.push_back(batch.target[i].item<int64_t>());
    data.push_back(batch.data.clone());
  }
};

auto MakeLoader(const ResumableSampler& sampler) {
  // Two workers prefetch up to four batches ahead of the loop.
  return torch::data::make_data_loader(IndexedDataset().map(torch::data::transforms::Stack<>()), sampler,
                                       torch::data::DataLoaderOptions().batch_size(kBatch).workers(2));
}

// Runs epochs from sampler.epoch() to kEpochs; stops (dropping the loader
// with its prefetched batches) after `stop_after` batches, if given.
Seen Iterate(ResumableSampler& sampler, size_t stop_after = SIZE_MAX) {
  Seen seen;
  auto loader = MakeLoader(sampler);
  size_t batches = 0;
  for (int64_t epoch = sampler.epoch(); epoch < kEpochs; ++epoch) {
    for (auto& batch : *loader) {
      Status consumed = sampler.BatchConsumed();
      EXPECT_TRUE(consumed.ok()) << consumed.ToString();
      seen.Add(batch);
      if (++batches == stop_after) return seen;
    }
  }
  return seen;
}

bool SameBits(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

TEST(ResumableSamplerTest, EpochsAreSeededPermutationsAndLeaveTheDefaultGeneratorAlone) {
  torch::manual_seed(5);
  const torch::Tensor rng_before = at::detail::getDefaultCPUGenerator().get_state();
  ResumableSampler sampler(kSamples, kSeed);
  const Seen seen = Iterate(sampler);
  EXPECT_TRUE(SameBits(at::detail::getDefaultCPUGenerator().get_state(), rng_before));
  ASSERT_EQ(seen.ids.size(), kEpochs * kSamples);
  std::vector<std::vector<int64_t>> epochs;
  for (int64_t e = 0; e < kEpochs; ++e) {
    epochs.emplace_back(seen.ids.begin() + e * kSamples, seen.ids.begin() + (e + 1) * kSamples);
    std::vector<int64_t> sorted = epochs.back();
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(kSamples);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all) << "epoch " << e << " is not a permutation";
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  std::vector<int64_t> ascending(kSamples);
  std::iota(ascending.begin(), ascending.end(), 0);
  EXPECT_NE(epochs[0], ascending);
  EXPECT_EQ(sampler.epoch(), kEpochs - 1);
  EXPECT_EQ(sampler.consumed(), kSamples);

  // The same seed gives the same order; another seed another one.
  ResumableSampler same(kSamples, kSeed), other(kSamples, kSeed + 1);
  EXPECT_EQ(Iterate(same).ids, seen.ids);
  EXPECT_NE(Iterate(other).ids, seen.ids);
}

// Batches consumed before the loader (and its prefetched batches) is dropped.
class ResumableSamplerResumeTest : public ::testing::TestWithParam<size_t> {};

TEST_P(ResumableSamplerResumeTest, ResumesAtTheExactNextSampleBitwise) {
  const size_t stop_after = GetParam();
  ResumableSampler reference_sampler(kSamples, kSeed);
  const Seen reference = Iterate(reference_sampler);

  ResumableSampler first(kSamples, kSeed);
  const Seen before = Iterate(first, stop_after);
  ASSERT_EQ(before.data.size(), stop_after);
  const std::string state = first.SaveState();
  ASSERT_EQ(state.size(), 48u);

  // A fresh process: another seed at construction, which the state replaces.
  ResumableSampler resumed(kSamples, kSeed + 99);
  Status loaded = resumed.LoadState(state);
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  EXPECT_EQ(resumed.epoch(), static_cast<int64_t>(stop_after / kBatchesPerEpoch));
  const Seen after = Iterate(resumed);

  std::vector<int64_t> ids = before.ids;
  ids.insert(ids.end(), after.ids.begin(), after.ids.end());
  EXPECT_EQ(ids, reference.ids);
  std::vector<torch::Tensor> data = before.data;
  data.insert(data.end(), after.data.begin(), after.data.end());
  ASSERT_EQ(data.size(), reference.data.size());
  for (size_t i = 0; i < data.size(); ++i) EXPECT_TRUE(SameBits(data[i], reference.data[i])) << "batch " << i;
}

// Mid-epoch 0, at the end of epoch 0 (epoch boundary), mid-epoch 1 right
// before its short last batch, and at the end of epoch 1.
INSTANTIATE_TEST_SUITE_P(StopPoints, ResumableSamplerResumeTest,
                         ::testing::Values(size_t{3}, kBatchesPerEpoch, 2 * kBatchesPerEpoch - 1, 2 * kBatchesPerEpoch));

TEST(ResumableSamplerTest, ConsumedCountsWhatTheLoopTookNotWhatWasPrefetched) {
  ResumableSampler sampler(kSamples, kSeed);
  auto loader = MakeLoader(sampler);
  auto it = loader->begin();  // the workers are now prefetching several batches
  ASSERT_TRUE(sampler.BatchConsumed().ok());
  EXPECT_EQ(sampler.consumed(), kBatch);
  ++it;
  ASSERT_TRUE(sampler.BatchConsumed().ok());
  EXPECT_EQ(sampler.consumed(), 2 * kBatch);
  std::string state = sampler.SaveState();
  uint64_t consumed;
  std::memcpy(&consumed, state.data() + 5 * sizeof(uint64_t), sizeof(consumed));
  EXPECT_EQ(consumed, 2 * kBatch);
}

TEST(ResumableSamplerTest, BatchConsumedWithoutABatchIsInvalidArgument) {
  ResumableSampler sampler(kSamples, kSeed);
  Status status = sampler.BatchConsumed();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "resumable sampler: BatchConsumed() without a batch handed out to the loader");
  EXPECT_EQ(sampler.consumed(), 0u);
}

TEST(ResumableSamplerTest, LoadStateRefusesForeignBytesAndChangesNothing) {
  ResumableSampler source(kSamples, kSeed);
  Iterate(source, 4);
  const std::string good = source.SaveState();

  ResumableSampler target(kSamples, kSeed);
  Status short_bytes = target.LoadState(good.substr(0, 40));
  EXPECT_EQ(short_bytes.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(short_bytes.message(), "resumable sampler: state of 40 bytes, expected 48");

  ResumableSampler smaller(kSamples - 1, kSeed);
  Status other_size = smaller.LoadState(good);
  EXPECT_EQ(other_size.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(other_size.message(), "resumable sampler: state for a dataset of 50 samples, this sampler has 49");

  std::string bad_version = good;
  bad_version[0] = 7;
  EXPECT_EQ(target.LoadState(bad_version).message(), "resumable sampler: state format 7, expected 1");

  std::string too_far = good;
  const uint64_t consumed = kSamples + 1;
  std::memcpy(too_far.data() + 5 * sizeof(uint64_t), &consumed, sizeof(consumed));
  EXPECT_EQ(target.LoadState(too_far).code(), StatusCode::kInvalidArgument);

  // None of the refusals moved the target: it still starts at epoch 0.
  EXPECT_EQ(target.epoch(), 0);
  EXPECT_EQ(target.consumed(), 0u);
  ResumableSampler fresh(kSamples, kSeed);
  EXPECT_EQ(Iterate(target).ids, Iterate(fresh).ids);
}

TEST(ResumableSamplerTest, TorchArchiveRoundTrip) {
  ResumableSampler source(kSamples, kSeed);
  Iterate(source, 9);
  torch::serialize::OutputArchive out;
  source.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);

  torch::serialize::InputArchive in;
  std::istringstream input(bytes.str());
  in.load_from(input);
  ResumableSampler target(kSamples, 0);
  target.load(in);
  EXPECT_EQ(target.SaveState(), source.SaveState());

  ResumableSampler smaller(kSamples - 1, kSeed);
  std::istringstream again(bytes.str());
  torch::serialize::InputArchive in_again;
  in_again.load_from(again);
  EXPECT_THROW(smaller.load(in_again), c10::Error);
}

// --- Distributed mode -----------------------------------------------------

// Epoch `epoch`'s order as the documented rule gives it.
std::vector<int64_t> EpochOrder(uint64_t seed, int64_t epoch, size_t n) {
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(mix(seed ^ mix(static_cast<uint64_t>(epoch))));
  torch::Tensor perm = torch::randperm(static_cast<int64_t>(n), gen, torch::kInt64);
  return std::vector<int64_t>(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + n);
}

// One sampler per rank of `world`, each resumed from `state` (if given).
std::vector<std::unique_ptr<ResumableSampler>> Ranks(int world, const std::string& state = "") {
  std::vector<std::unique_ptr<ResumableSampler>> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.push_back(std::make_unique<ResumableSampler>(kSamples, kSeed));
    if (!state.empty()) {
      EXPECT_TRUE(ranks.back()->LoadState(state).ok());
    }
    EXPECT_TRUE(ranks.back()->Distribute(r, world).ok());
    ranks.back()->reset();
  }
  return ranks;
}

// `steps` lockstep steps (one batch of `batch` per rank each), or until a
// rank's pass ends: every rank's samples, in order.
std::vector<std::vector<int64_t>> Take(std::vector<std::unique_ptr<ResumableSampler>>& ranks, size_t batch,
                                       size_t steps = SIZE_MAX) {
  std::vector<std::vector<int64_t>> taken(ranks.size());
  for (size_t step = 0; step < steps; ++step) {
    bool any = false;
    for (size_t r = 0; r < ranks.size(); ++r) {
      auto indices = ranks[r]->next(batch);
      if (!indices.has_value()) continue;
      any = true;
      EXPECT_TRUE(ranks[r]->BatchConsumed().ok());
      taken[r].insert(taken[r].end(), indices->begin(), indices->end());
    }
    if (!any) break;
  }
  return taken;
}

TEST(ResumableSamplerDistributedTest, RankRTakesEveryWthSampleFromItsRankAndTheTailIsDropped) {
  auto ranks = Ranks(4);
  const std::vector<int64_t> order = EpochOrder(kSeed, 0, kSamples);
  const auto taken = Take(ranks, 5);
  for (size_t r = 0; r < 4; ++r) {
    std::vector<int64_t> expected;
    for (size_t j = 0; j < kSamples / 4; ++j) expected.push_back(order[r + 4 * j]);  // 12 each, 2 dropped
    EXPECT_EQ(taken[r], expected) << "rank " << r;
    EXPECT_EQ(ranks[r]->consumed(), 48u);
    EXPECT_EQ(ranks[r]->epoch(), 0);
  }
}

struct Resize {
  int from;
  int to;
};

class ResumableSamplerResizeTest : public ::testing::TestWithParam<Resize> {};

// Three lockstep steps of 2 samples at `from` ranks, the state of rank 0,
// then the rest of the epoch at `to` ranks: every sample of the epoch is
// taken exactly once, but the tail of fewer than `to` samples.
TEST_P(ResumableSamplerResizeTest, UnionOfSamplesAcrossTheResizeIsTheEpochOnce) {
  const Resize resize = GetParam();
  auto before = Ranks(resize.from);
  const auto first = Take(before, 2, 3);
  const size_t p = 3 * 2 * static_cast<size_t>(resize.from);
  for (const auto& rank : before) EXPECT_EQ(rank->consumed(), p);
  const std::string state = before[0]->SaveState();
  for (const auto& rank : before) EXPECT_EQ(rank->SaveState(), state);  // one global position

  auto after = Ranks(resize.to, state);
  const auto second = Take(after, 2);
  const std::vector<int64_t> order = EpochOrder(kSeed, 0, kSamples);
  for (size_t r = 0; r < second.size(); ++r) {
    std::vector<int64_t> expected;
    for (size_t j = 0; j < (kSamples - p) / static_cast<size_t>(resize.to); ++j) {
      expected.push_back(order[p + r + static_cast<size_t>(resize.to) * j]);
    }
    EXPECT_EQ(second[r], expected) << "rank " << r;
  }
  std::vector<int64_t> all;
  for (const auto& ids : first) all.insert(all.end(), ids.begin(), ids.end());
  for (const auto& ids : second) all.insert(all.end(), ids.begin(), ids.end());
  const size_t tail = (kSamples - p) % static_cast<size_t>(resize.to);
  ASSERT_EQ(all.size(), kSamples - tail);
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(order.begin(), order.end() - static_cast<std::ptrdiff_t>(tail));
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(all, expected);  // no repeat, no skip
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ResumableSamplerResizeTest,
                         ::testing::Values(Resize{4, 2}, Resize{2, 4}, Resize{4, 3}, Resize{3, 1}, Resize{1, 3}),
                         [](const ::testing::TestParamInfo<Resize>& info) {
                           return std::to_string(info.param.from) + "to" + std::to_string(info.param.to);
                         });

TEST(ResumableSamplerDistributedTest, OneRankIsThePlainSamplerByteForByte) {
  ResumableSampler plain(kSamples, kSeed), one(kSamples, kSeed);
  ASSERT_TRUE(one.Distribute(0, 1).ok());
  EXPECT_EQ(Iterate(plain, 9).ids, Iterate(one, 9).ids);
  EXPECT_EQ(plain.SaveState(), one.SaveState());
}

TEST(ResumableSamplerDistributedTest, AnEpochWithFewerSamplesLeftThanRanksResumesAtTheNextEpoch) {
  ResumableSampler source(kSamples, kSeed);
  ASSERT_TRUE(source.Distribute(0, 1).ok());
  Iterate(source, 6);  // 48 samples of epoch 0
  ASSERT_EQ(source.consumed(), 48u);
  auto three = Ranks(3, source.SaveState());  // 2 left, fewer than 3 ranks
  const std::vector<int64_t> order = EpochOrder(kSeed, 1, kSamples);
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(three[r]->epoch(), 1);
    auto indices = three[r]->next(1);
    ASSERT_TRUE(indices.has_value());
    EXPECT_EQ((*indices)[0], static_cast<size_t>(order[r]));
  }
  auto two = Ranks(2, source.SaveState());  // 2 left: one each
  const std::vector<int64_t> epoch0 = EpochOrder(kSeed, 0, kSamples);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(two[r]->epoch(), 0);
    EXPECT_EQ(two[r]->next(4).value(), std::vector<size_t>{static_cast<size_t>(epoch0[48 + r])});
  }
}

TEST(ResumableSamplerDistributedTest, DistributeRefusesBadRanksAndAPassUnderWay) {
  ResumableSampler sampler(kSamples, kSeed);
  Status bad = sampler.Distribute(2, 2);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "resumable sampler: rank 2 of 2 ranks");
  EXPECT_EQ(sampler.Distribute(0, 0).message(), "resumable sampler: rank 0 of 0 ranks");
  EXPECT_EQ(sampler.Distribute(-1, 3).code(), StatusCode::kInvalidArgument);
  sampler.reset();
  ASSERT_TRUE(sampler.next(4).has_value());
  Status under_way = sampler.Distribute(1, 2);
  EXPECT_EQ(under_way.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(under_way.message(),
            "resumable sampler: Distribute() while a pass is under way (call it before the loader starts, or after "
            "LoadState)");
  // The refusals changed nothing: still one rank, the next sample the plain
  // order's fifth.
  EXPECT_EQ(sampler.next(1).value()[0], static_cast<size_t>(EpochOrder(kSeed, 0, kSamples)[4]));
}

}  // namespace
}  // namespace trainsnap
