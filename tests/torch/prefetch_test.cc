// Prefetch reads only unchecked fields, so that a walk may call it on any
// tensor a model holds: none of these throws or faults, and none changes
// the tensor (its bytes, its gradient) it is called on.
#include "torch/prefetch.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace trainsnap::internal {
namespace {

void PrefetchEveryStep(const torch::Tensor& tensor) {
  const c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  for (PrefetchStep step : {PrefetchStep::kImpl, PrefetchStep::kStorage, PrefetchStep::kData}) {
    Prefetch(impl, step);
    Prefetch(GradImpl(impl), step);
  }
}

TEST(PrefetchTest, OddTensorsAreSafeAndUnchanged) {
  torch::Tensor dense = torch::arange(16, torch::kFloat32);
  torch::Tensor with_grad = torch::ones({4}, torch::requires_grad());
  with_grad.mutable_grad() = torch::full({4}, 2.0);
  const std::vector<torch::Tensor> odd = {
      dense,
      dense.slice(0, 3, 9),                           // a view at an offset
      torch::empty({0}),                              // no bytes: a null data pointer
      torch::empty({4}, torch::device(torch::kMeta)),  // storage without data
      torch::eye(3).to_sparse(),                      // no storage
      torch::ones({8}).expand({4, 8}),                // stride 0
      with_grad,
      torch::Tensor(),                                // undefined: the singleton impl
  };
  for (const torch::Tensor& tensor : odd) PrefetchEveryStep(tensor);
  Prefetch(nullptr, PrefetchStep::kData);
  EXPECT_EQ(GradImpl(nullptr), nullptr);
  EXPECT_EQ(GradImpl(dense.unsafeGetTensorImpl()), nullptr);  // no autograd metadata
  EXPECT_EQ(GradImpl(with_grad.unsafeGetTensorImpl()), with_grad.grad().unsafeGetTensorImpl());
  EXPECT_TRUE(torch::equal(dense, torch::arange(16, torch::kFloat32)));
  EXPECT_TRUE(torch::equal(with_grad.grad(), torch::full({4}, 2.0)));
}

}  // namespace
}  // namespace trainsnap::internal
