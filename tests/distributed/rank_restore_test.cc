// The parts of a restore on several ranks that need no collective: which
// stores a rank reads, where each replicated tensor is, the packed tensors a
// rank sends, the RNG of a new rank, and the reader over all of them.
#include "distributed/rank_restore.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>

#include "testing/store_fixtures.h"

namespace trainsnap::internal {
namespace {

using testing::TempDir;
using testing::TensorSpec;
using testing::TestStoreOptions;
using testing::WriteSnapshot;

std::vector<uint8_t> Bytes(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous();
  const auto* data = static_cast<const uint8_t*>(c.data_ptr());
  return std::vector<uint8_t>(data, data + c.nbytes());
}

bool SameBits(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && Bytes(a) == Bytes(b);
}

TEST(RankRestoreTest, EachStoreIsReadByOneRankAndNewRanksRestoreRankRModN) {
  EXPECT_EQ(StoresReadBy(0, 2, 4), (std::vector<int>{0, 2}));
  EXPECT_EQ(StoresReadBy(1, 2, 4), (std::vector<int>{1, 3}));
  EXPECT_EQ(StoresReadBy(2, 3, 4), (std::vector<int>{2}));
  EXPECT_EQ(StoresReadBy(0, 3, 4), (std::vector<int>{0, 3}));
  EXPECT_EQ(StoresReadBy(3, 4, 2), (std::vector<int>{}));
  EXPECT_EQ(HomeRank(1, 4), 1);
  EXPECT_EQ(HomeRank(3, 2), 1);
  EXPECT_EQ(HomeRank(2, 2), 0);
}

TEST(RankRestoreTest, ReplicatedHoldersFollowTheExternalTensorsAndTheLayout) {
  proto::TrainingManifest manifest;
  manifest.add_params()->set_id(1);
  manifest.add_params()->set_id(2);
  proto::ModelTensor* buffer = manifest.add_model_tensors();
  buffer->set_id(3);
  buffer->set_role("buffer");
  proto::OptimizerManifest* optimizer = manifest.add_optimizers();
  optimizer->set_role_prefix("opt:");
  proto::ParamOptimizerState* state = optimizer->add_params();
  state->set_param_id(1);
  state->add_roles("exp_avg");
  auto external = [&](uint64_t id, const std::string& role, const std::string& source) {
    proto::ExternalTensor* tensor = manifest.add_external_tensors();
    tensor->set_id(id);
    tensor->set_role(role);
    tensor->set_source(source);
  };
  external(2, "param", "rank-00001");
  external(1, "opt:exp_avg", "rank-00002");
  Result<ReplicatedTensors> both = ReplicatedHolders(manifest, 0, true, true);
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  const std::map<int, std::vector<TensorKey>> model{{0, {{1, "param"}, {3, "buffer"}}}, {1, {{2, "param"}}}};
  EXPECT_EQ(both->model, model);
  const std::map<int, std::vector<TensorKey>> optimizer_state{{2, {{1, "opt:exp_avg"}}}};
  EXPECT_EQ(both->optimizer, optimizer_state);
  Result<ReplicatedTensors> model_only = ReplicatedHolders(manifest, 0, true, false);
  ASSERT_TRUE(model_only.ok());
  EXPECT_TRUE(model_only->optimizer.empty());
  external(9, "param", "elsewhere");
  Result<ReplicatedTensors> bad = ReplicatedHolders(manifest, 0, true, true);
  EXPECT_EQ(bad.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(bad.status().message(), "tensor ID 9 role param is stored in `elsewhere`, no rank store");
}

class PackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = Store::Open(dir_.Sub("store"), TestStoreOptions(/*sync=*/false));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    ASSERT_TRUE(WriteSnapshot(*store_, 5,
                              {{1, "param", DType::kFloat32, {2, 3}, Bytes(floats_)},
                               {2, "exp_avg", DType::kInt64, {4}, Bytes(longs_)},
                               {3, "buffer", DType::kFloat32, {0}, {}},
                               {4, "grad", DType::kFloat32, {2, 3}, Bytes(floats_ * 2)}})
                    .ok());
  }
  TempDir dir_;
  std::unique_ptr<Store> store_;
  torch::Tensor floats_ = torch::arange(6, torch::kFloat32).reshape({2, 3}).div(7);
  torch::Tensor longs_ = torch::tensor(std::vector<int64_t>{5, -1, int64_t{1} << 40, 0}, torch::kInt64);
};

TEST_F(PackTest, PackedTensorsUnpackBitwiseWithTheirShapesAndDtypes) {
  Result<torch::Tensor> packed = PackTensors(5, {{store_.get(), {{1, "param"}, {2, "exp_avg"}, {3, "buffer"}}}});
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  Result<std::map<TensorKey, torch::Tensor>> tensors = UnpackTensors(*packed);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  ASSERT_EQ(tensors->size(), 3u);
  EXPECT_TRUE(SameBits(tensors->at({1, "param"}), floats_));
  EXPECT_TRUE(SameBits(tensors->at({2, "exp_avg"}), longs_));
  EXPECT_EQ(tensors->at({3, "buffer"}).sizes(), c10::IntArrayRef({0}));
  // Nothing to pack: no bytes.
  Result<torch::Tensor> none = PackTensors(5, {{store_.get(), {}}});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->defined());
  EXPECT_TRUE(UnpackTensors(*none)->empty());
}

TEST_F(PackTest, AMissingTensorOrDamagedBytesAreCorruption) {
  Result<torch::Tensor> missing = PackTensors(5, {{store_.get(), {{1, "param"}, {7, "param"}}}});
  EXPECT_EQ(missing.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(missing.status().message(),
            store_->path() + ": its snapshot lacks tensor ID 7 role param, which the manifest says it holds");
  Result<torch::Tensor> packed = PackTensors(5, {{store_.get(), {{1, "param"}}}});
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(UnpackTensors(packed->narrow(0, 0, 20)).status().code(), StatusCode::kCorruption);
  torch::Tensor bad_magic = packed->clone();
  bad_magic.data_ptr<uint8_t>()[8] ^= 1;
  EXPECT_EQ(UnpackTensors(bad_magic).status().message(), "exchanged tensors: bad header");
}

TEST(RankRestoreTest, ANewRanksGeneratorIsSeededFromItsHomeRanksState) {
  const torch::Tensor state = at::detail::getDefaultCPUGenerator().get_state();
  const std::string saved(static_cast<const char*>(state.data_ptr()), state.nbytes());
  proto::TrainingManifest manifest;
  proto::GeneratorState* cpu = manifest.add_rng();
  cpu->set_device("cpu");
  cpu->set_state(saved);
  ASSERT_TRUE(DeriveRng(&manifest, 5).ok());
  at::Generator expected = at::make_generator<at::CPUGeneratorImpl>();
  expected.set_current_seed(DerivedSeed(saved, 5));
  const torch::Tensor bytes = expected.get_state();
  EXPECT_EQ(manifest.rng(0).state(), std::string(static_cast<const char*>(bytes.data_ptr()), bytes.nbytes()));
  EXPECT_NE(DerivedSeed(saved, 5), DerivedSeed(saved, 6));
  EXPECT_EQ(DerivedSeed(saved, 5), DerivedSeed(saved, 5));
  // The live generator is left alone.
  EXPECT_TRUE(SameBits(at::detail::getDefaultCPUGenerator().get_state(), state));
}

TEST_F(PackTest, TheReaderTakesExchangedTensorsThenSourcesThenItsHomeStore) {
  TempDir other_dir;
  auto other = Store::Open(other_dir.Sub("other"), TestStoreOptions(/*sync=*/false));
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(WriteSnapshot(**other, 5, {{4, "exp_avg", DType::kFloat32, {2, 3}, Bytes(floats_ * 3)}}).ok());
  proto::TrainingManifest manifest;
  proto::ExternalTensor* external = manifest.add_external_tensors();
  external->set_id(4);
  external->set_role("exp_avg");
  external->set_source("rank-00001");
  std::map<TensorKey, torch::Tensor> exchanged{{{1, "param"}, floats_ * 5}};
  std::vector<std::string> asked;
  RankTensorReader reader(
      *store_,
      [&](const std::string& source) -> Result<Store*> {
        asked.push_back(source);
        return other->get();
      },
      exchanged);
  const std::string name = "t";
  const std::vector<int64_t> shape{2, 3};
  std::vector<WantedTensor> wanted(3);
  wanted[0] = {1, "param", &name, shape, DType::kFloat32};
  wanted[1] = {4, "grad", &name, shape, DType::kFloat32};
  wanted[2] = {4, "exp_avg", &name, shape, DType::kFloat32};
  Result<DecodedTensors> decoded = reader.Read(5, manifest, wanted);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(SameBits(*decoded->Find(1, "param"), floats_ * 5));
  EXPECT_TRUE(SameBits(*decoded->Find(4, "grad"), floats_ * 2));
  EXPECT_TRUE(SameBits(*decoded->Find(4, "exp_avg"), floats_ * 3));
  EXPECT_EQ(asked, (std::vector<std::string>{"rank-00001"}));
  const std::vector<int64_t> other_shape{3, 2};
  std::vector<WantedTensor> misshaped{{1, "param", &name, other_shape, DType::kFloat32}};
  Result<DecodedTensors> refused = reader.Read(5, manifest, misshaped);
  EXPECT_EQ(refused.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(refused.status().message(), "tensor `t` role param: stored shape [2, 3], manifest says [3, 2]");
}

}  // namespace
}  // namespace trainsnap::internal
