// A Checkpointer on a store that lost a pack file (docs/reliability.md,
// "Damaged packs"): the capture after the damage was found writes the lost
// bytes again, also for a frozen base whose stored records the change
// tracker would otherwise reuse without reading a byte.
#include <cstring>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/store_fixtures.h"
#include "trainsnap/checkpointer.h"

namespace trainsnap {
namespace {

namespace fs = std::filesystem;
using testing::TempStore;

TEST(CheckpointerDamageTest, AFrozenBaseWhosePackWasLostIsWrittenAgainByTheNextCapture) {
  torch::manual_seed(5);
  torch::nn::Sequential model(torch::nn::Linear(64, 64), torch::nn::Linear(64, 8));
  for (auto& p : model[0]->parameters()) p.set_requires_grad(false);
  torch::optim::Adam adam(model[1]->parameters(), torch::optim::AdamOptions(1e-2));
  auto step = [&] {
    adam.zero_grad();
    model->forward(torch::randn({4, 64})).sum().backward();
    adam.step();
  };
  TrainingState state;
  state.model = model.ptr().get();
  state.optimizer = &adam;
  state.rng = false;
  CheckpointerOptions options;
  options.model_state = ModelState::kFull;  // the frozen base is captured, then reused unchanged
  TempStore ts;
  Checkpointer checkpointer(*ts.store, options);
  step();
  ASSERT_TRUE(checkpointer.Capture(1, state).ok());
  step();
  ASSERT_TRUE(checkpointer.Capture(2, state).ok());
  auto reused = ts.store->Info(2);
  ASSERT_TRUE(reused.ok());
  const uint64_t frozen_bytes = (64 * 64 + 64) * 4;
  EXPECT_LT(reused->new_bytes,
            frozen_bytes);  // the base was referenced, not written

  // Every pack file is deleted under the open store; Verify finds it.
  for (const auto& e : fs::directory_iterator(ts.path() / "packs")) fs::remove(e.path());
  auto verify = ts.store->Verify();
  ASSERT_TRUE(verify.ok()) << verify.status().ToString();
  EXPECT_FALSE(verify->ok());

  step();
  Status captured = checkpointer.Capture(3, state);
  ASSERT_TRUE(captured.ok()) << captured.ToString();
  auto written = ts.store->Info(3);
  ASSERT_TRUE(written.ok());
  EXPECT_GT(written->new_bytes, frozen_bytes / 2);  // the base was written again
  // Nothing of step 3 references lost bytes (before, the base's records
  // were reused and every read of them failed).
  auto clean = ts.store->Verify(3);
  ASSERT_TRUE(clean.ok());
  EXPECT_TRUE(clean->ok()) << clean->problems.front().status.ToString();

  torch::manual_seed(6);
  torch::nn::Sequential other(torch::nn::Linear(64, 64), torch::nn::Linear(64, 8));
  for (auto& p : other[0]->parameters()) p.set_requires_grad(false);
  torch::optim::Adam other_adam(other[1]->parameters(), torch::optim::AdamOptions(1e-2));
  TrainingState target;
  target.model = other.ptr().get();
  target.optimizer = &other_adam;
  target.rng = false;
  Status restored = checkpointer.Restore(3, target);
  ASSERT_TRUE(restored.ok()) << restored.ToString();
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    const torch::Tensor a = model->parameters()[i], b = other->parameters()[i];
    EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0) << "parameter " << i;
  }
}

}  // namespace
}  // namespace trainsnap
