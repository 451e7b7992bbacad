#include "torch/slab_chain.h"

#include <cstdint>

namespace trainsnap::internal {

torch::Tensor CutFromSlab(const torch::Tensor& slab, size_t* used, c10::IntArrayRef sizes, c10::ScalarType dtype) {
  const size_t bytes = static_cast<size_t>(c10::multiply_integers(sizes)) * c10::elementSize(dtype);
  const size_t piece = SlabPieceBytes(bytes);
  if (*used > slab.nbytes() || piece > slab.nbytes() - *used) return torch::Tensor();
  const size_t offset = static_cast<size_t>(slab.storage_offset()) * slab.element_size() + *used;
  if (offset % c10::elementSize(dtype) != 0) return torch::Tensor();  // only a slab that starts off-alignment
  *used += piece;
  // The piece is a tensor over the slab's own storage, not from_blob with a
  // deleter that holds the slab: one TensorImpl instead of a deleter context,
  // a StorageImpl and two TensorImpls (from_blob's and make_variable's copy).
  // At 150,000 small tensors per capture those allocations were a fifth of
  // the staging time (to scale linearly with the parameter count). Pieces are aligned to
  // kSlabAlignment, a multiple of every element size, so the byte offset is
  // a whole number of elements.
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(slab.storage()), slab.key_set(),
                                                   c10::scalarTypeToTypeMeta(dtype));
  impl->set_storage_offset(static_cast<int64_t>(offset / c10::elementSize(dtype)));
  impl->set_sizes_contiguous(sizes);
  return torch::Tensor(std::move(impl));
}

}  // namespace trainsnap::internal
