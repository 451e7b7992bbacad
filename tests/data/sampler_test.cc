// ResumableSampler with LibTorch's DataLoader: shuffled epochs that do not
// touch the default generator, and a loader dropped mid-epoch or at an epoch
// boundary, with batches prefetched by its workers, that resumes in a fresh
// sampler and loader at the exact next sample, bit for bit.
#include "trainsnap/sampler.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <sstream>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

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

}  // namespace
}  // namespace trainsnap
