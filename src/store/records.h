// Conversions between the public record structs and their protobuf forms
// (proto/store.proto), with the validation every read applies.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

// The format version written into StoreMeta and SnapshotRecord.
inline constexpr uint32_t kStoreFormatVersion = 1;
inline constexpr char kHashName[] = "xxh3-128";

// Serializes record (param_id and role live in the key, not the value).
std::string SerializeTensorRecord(const TensorRecord& record);
// Parses and validates a tensor record value: Corruption when it does not
// parse, the dtype is unknown, a dimension is negative, numel * itemsize
// overflows or differs from bytes, or the chunk raw sizes do not add up.
Result<TensorRecord> ParseTensorRecord(std::string_view value, uint64_t param_id, std::string role);

// Checks dtype and shape (InvalidArgument for an unknown dtype, a negative
// dimension or a size that overflows).
// Returns the expected byte count on success.
Result<uint64_t> CheckedTensorBytes(uint32_t dtype, const std::vector<int64_t>& shape);

struct SnapshotRecordData {
  SnapshotInfo info;
  std::string manifest;
};
std::string SerializeSnapshotRecord(const SnapshotInfo& info, std::string_view manifest);
// Corruption when it does not parse or its step differs from `step`;
// NotSupported for an unknown format version.
Result<SnapshotRecordData> ParseSnapshotRecord(std::string_view value, int64_t step);

// meta/"counts" (format version 3): written in every commit, delete and
// repair batch; List(), Latest() and the scans of garbage collection and
// verify are checked against it.
inline constexpr char kCountsKey[] = "counts";
struct StoreCountsData {
  uint64_t snapshots = 0;
  uint64_t transactions = 0;
  std::optional<int64_t> newest_step;  // none iff snapshots == 0
};
std::string SerializeStoreCounts(const StoreCountsData& counts);
// Corruption when it does not parse, or a non-empty store has no newest step.
Result<StoreCountsData> ParseStoreCounts(std::string_view value);

}  // namespace trainsnap::internal
