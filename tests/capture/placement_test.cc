// CheckpointerOptions::placement (TensorPlacement) and RestoreOptions::sources
// (TensorSources): the per-tensor hooks DistributedCheckpointer builds on,
// here with two plain stores in one process.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/training_rig.h"
#include "trainsnap/checkpointer.h"

namespace trainsnap {
namespace {

using capture_test::BitwiseEqual;
using capture_test::TempStore;

// Places every candidate whose (name, role) is in `elsewhere` in source
// "other"; records what it was offered.
class Placement final : public TensorPlacement {
 public:
  Result<std::vector<std::string>> Place(int64_t, const std::vector<PlacementCandidate>& candidates) override {
    offered.clear();
    std::vector<std::string> out;
    for (const PlacementCandidate& c : candidates) {
      offered.push_back(c.name + "/" + c.role + "/" + std::to_string(c.bytes));
      out.push_back(elsewhere.count(c.name + "/" + c.role) ? "other" : "");
    }
    if (wrong_size) out.pop_back();
    return out;
  }
  std::set<std::string> elsewhere;
  std::vector<std::string> offered;
  bool wrong_size = false;
};

class Sources final : public TensorSources {
 public:
  Result<Store*> Source(const std::string& source) override {
    ++calls;
    if (source != "other" || store == nullptr) return Status::NotFound("no source `" + source + "`");
    return store;
  }
  Store* store = nullptr;
  int calls = 0;
};

struct Model {
  Model() {
    torch::manual_seed(3);
    net = torch::nn::Sequential(torch::nn::Linear(8, 8), torch::nn::Linear(8, 2));
    optimizer = std::make_unique<torch::optim::AdamW>(net->parameters(), torch::optim::AdamWOptions(1e-2));
    torch::Tensor loss = net->forward(torch::ones({4, 8})).sum();
    loss.backward();
    optimizer->step();
  }
  TrainingState State() {
    TrainingState state;
    state.model = net.ptr().get();
    state.optimizer = optimizer.get();
    state.rng = false;
    return state;
  }
  torch::nn::Sequential net{nullptr};
  std::unique_ptr<torch::optim::AdamW> optimizer;
};

TEST(PlacementTest, TensorsPlacedElsewhereAreNotStoredHereAndRestoreFromTheirSource) {
  TempStore here, other;
  Model model;
  Placement placement;
  placement.elsewhere = {"0.weight/param", "0.weight/exp_avg", "1.bias/exp_avg_sq"};
  CheckpointerOptions options;
  options.placement = &placement;
  {
    Checkpointer checkpointer(*here.store, options);
    ASSERT_TRUE(checkpointer.Capture(1, model.State()).ok());
  }
  {
    Checkpointer plain(*other.store);
    ASSERT_TRUE(plain.Capture(1, model.State()).ok());
  }
  // Offered: every parameter and optimizer-state tensor, sorted by (name,
  // role), never the gradients.
  EXPECT_EQ(placement.offered,
            (std::vector<std::string>{"0.bias/exp_avg/32", "0.bias/exp_avg_sq/32", "0.bias/param/32",
                                      "0.weight/exp_avg/256", "0.weight/exp_avg_sq/256", "0.weight/param/256",
                                      "1.bias/exp_avg/8", "1.bias/exp_avg_sq/8", "1.bias/param/8",
                                      "1.weight/exp_avg/64", "1.weight/exp_avg_sq/64", "1.weight/param/64"}));
  // Here: 12 tensors + 4 gradients - the 3 placed elsewhere.
  auto records = here.store->Tensors(1);
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(records->size(), 13u);
  auto info = here.store->Info(1);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->logical_bytes, 4u * (256 + 32 + 64 + 8) - (256 + 256 + 8));  // param, 2 moments, grad

  Model fresh;
  {
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : fresh.net->parameters()) p.mul_(-2);
  }
  Sources sources;
  sources.store = other.store.get();
  RestoreOptions restore;
  restore.sources = &sources;
  Checkpointer reader(*here.store);
  ASSERT_TRUE(reader.Restore(1, fresh.State(), restore).ok());
  EXPECT_EQ(sources.calls, 1);  // one source, opened once
  auto a = model.net->parameters(), b = fresh.net->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(BitwiseEqual(a[i], b[i])) << i;
  const auto& sa = static_cast<const torch::optim::AdamWParamState&>(
      *model.optimizer->state().at(c10::guts::to_string(a[1].unsafeGetTensorImpl())));
  const auto& sb = static_cast<const torch::optim::AdamWParamState&>(
      *fresh.optimizer->state().at(c10::guts::to_string(b[1].unsafeGetTensorImpl())));
  EXPECT_TRUE(BitwiseEqual(sa.exp_avg(), sb.exp_avg()));
}

TEST(PlacementTest, RestoreWithoutOrFailingSourcesFailsAndChangesNothing) {
  TempStore here;
  Model model;
  Placement placement;
  placement.elsewhere = {"1.weight/param"};
  CheckpointerOptions options;
  options.placement = &placement;
  Checkpointer checkpointer(*here.store, options);
  ASSERT_TRUE(checkpointer.Capture(1, model.State()).ok());

  Model fresh;
  {
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : fresh.net->parameters()) p.fill_(7);
  }
  const torch::Tensor before = fresh.net->parameters()[0].clone();
  Status no_sources = checkpointer.Restore(1, fresh.State());
  EXPECT_EQ(no_sources.code(), StatusCode::kNotSupported);
  EXPECT_EQ(no_sources.message(),
            "restore step 1: tensor `1.weight` role param is stored in source `other` (a multi-process run's "
            "store): RestoreOptions::sources is not set");
  Sources failing;  // knows no store
  RestoreOptions restore;
  restore.sources = &failing;
  Status failed = checkpointer.Restore(1, fresh.State(), restore);
  EXPECT_EQ(failed.code(), StatusCode::kNotFound);
  EXPECT_EQ(failed.message(), "restore step 1: source `other`: no source `other`");
  EXPECT_TRUE(BitwiseEqual(fresh.net->parameters()[0], before));
  // A source without the tensor: Corruption naming it.
  TempStore empty;
  Sources wrong;
  wrong.store = empty.store.get();
  restore.sources = &wrong;
  {
    Checkpointer other_writer(*empty.store);
    Model unrelated;
    TrainingState only_model;
    only_model.model = unrelated.net.ptr().get();
    only_model.rng = false;
    ASSERT_TRUE(other_writer.Capture(1, only_model).ok());
    ASSERT_TRUE(empty.store->Delete(1).ok());
    ASSERT_TRUE(other_writer.Capture(2, only_model).ok());
  }
  Status missing = checkpointer.Restore(1, fresh.State(), restore);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.ToString();
  EXPECT_TRUE(BitwiseEqual(fresh.net->parameters()[0], before));
}

TEST(PlacementTest, APlacementAnsweringForAnotherCountFailsTheCapture) {
  TempStore here;
  Model model;
  Placement placement;
  placement.wrong_size = true;
  CheckpointerOptions options;
  options.placement = &placement;
  Checkpointer checkpointer(*here.store, options);
  Status status = checkpointer.Capture(1, model.State());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "capture step 1: placement: the placement answered for 11 of 12 tensors");
  auto list = here.store->List();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
}

}  // namespace
}  // namespace trainsnap
