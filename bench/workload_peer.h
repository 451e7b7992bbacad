// The peers trainsnap_bench measures against, in the same run: LibTorch's own
// serialization (what torch::save(module) / torch::save(optimizer) write) of
// the workload's state to a file, and those bytes compressed with Zstd.
#pragma once

#include <cstdint>
#include <string>

#include "trainsnap/status.h"
#include "workload.h"

namespace trainsnap::bench {

struct PeerSave {
  uint64_t file_bytes = 0;  // size of the torch archive on disk
  uint64_t zstd_bytes = 0;  // ZSTD_compress of the same bytes at the given level
  double save_s = 0;        // serialization + write (no fsync, like torch::save)
  double zstd_s = 0;        // compression of the bytes in memory
};

// Writes the model (full: every parameter and buffer, as torch::save(module)
// does; otherwise only the trainable parameters, the PEFT way) and the
// optimizer into one torch archive at `path`. When zstd_level > 0 the file's
// bytes are also compressed (not written) to report zstd_bytes.
Result<PeerSave> SaveTorchPeer(Workload& workload, bool full, const std::string& path, int zstd_level);

// torch::load of a file written by SaveTorchPeer into `workload` (same shapes).
Status LoadTorchPeer(Workload& workload, bool full, const std::string& path);

}  // namespace trainsnap::bench
