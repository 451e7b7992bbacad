#include <gtest/gtest.h>
#include <torch/torch.h>

#include "trainsnap/checkpointer.h"

TEST(TorchSmokeTest, LinksAgainstLibTorch) {
  torch::manual_seed(1);
  auto a = torch::randn({4});
  torch::manual_seed(1);
  auto b = torch::randn({4});
  EXPECT_TRUE(torch::equal(a, b));
}
