// The layout of a run directory and the global commit record
// (docs/distributed.md): rank-NNNNN/ holds rank N's store, global/ a store
// whose snapshots carry no tensors, only the record of a global step.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trainsnap/status.h"

namespace trainsnap::internal {

std::string RankStorePath(const std::string& run_dir, int rank);  // <run_dir>/rank-00003
std::string GlobalStorePath(const std::string& run_dir);          // <run_dir>/global
std::string RankStoreName(int rank);                              // rank-00003
// The rank a RankStoreName names; -1 for any other text.
int ParseRankStoreName(std::string_view name);
// Prefix of the rendezvous files of the checkpointer's private Gloo group.
inline constexpr char kRendezvousPrefix[] = ".c10d-";

// What every rank's local snapshot of a global step holds, as rank 0 records it.
struct RankFigures {
  uint64_t logical_bytes = 0;
  uint64_t stored_bytes = 0;  // encoded bytes of every chunk the snapshot references
  uint64_t new_bytes = 0;     // encoded bytes this snapshot wrote first
};

// The manifest of a snapshot of the global store: the commit record of one
// global step.
struct GlobalRecord {
  int world_size = 0;
  bool model_replicated = true;
  bool optimizer_replicated = true;
  std::vector<RankFigures> ranks;  // world_size entries, by rank
};

// Text, one "key value" per line (docs/distributed.md, "Global record").
std::string EncodeGlobalRecord(const GlobalRecord& record);
// Corruption naming the first bad line; NotSupported for another format version.
Result<GlobalRecord> ParseGlobalRecord(std::string_view bytes);

}  // namespace trainsnap::internal
