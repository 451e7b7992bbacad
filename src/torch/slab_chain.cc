#include "torch/slab_chain.h"

#include <cstdint>

namespace trainsnap::internal {

torch::Tensor CutFromSlab(const torch::Tensor& slab, size_t* used, c10::IntArrayRef sizes, c10::ScalarType dtype) {
  const size_t bytes = static_cast<size_t>(c10::multiply_integers(sizes)) * c10::elementSize(dtype);
  const size_t piece = (bytes + kSlabAlignment - 1) / kSlabAlignment * kSlabAlignment;
  if (*used > slab.nbytes() || piece > slab.nbytes() - *used) return torch::Tensor();
  void* data = static_cast<uint8_t*>(slab.data_ptr()) + *used;
  *used += piece;
  return torch::from_blob(data, sizes, [slab](void*) {}, torch::TensorOptions().dtype(dtype));
}

}  // namespace trainsnap::internal
