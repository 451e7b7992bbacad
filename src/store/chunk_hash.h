// The address of a chunk: XXH3-128 of its raw bytes (docs/format.md, "Keys").
#pragma once

#include <cstddef>

#include "trainsnap/store.h"

namespace trainsnap::internal {

// XXH3-128 (seed 0) of `size` bytes, in canonical form: high64 BE ‖ low64 BE.
ChunkHash HashChunk(const void* data, size_t size);

}  // namespace trainsnap::internal
