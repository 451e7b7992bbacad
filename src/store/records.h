// Conversions between the public record structs and their protobuf forms
// (proto/store.proto), with the validation every read applies.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

// Versions of the snapshot record itself (SnapshotRecord.format_version; the
// store's format version is the meta record's, kMetaFormatVersion in
// catalog.h): 1 keeps the tensor records in the tensors CF; 2
// (written since store format version 4) keeps them in record groups,
// chunks that the snapshot record lists.
inline constexpr uint32_t kPlainSnapshotRecordVersion = 1;
inline constexpr uint32_t kGroupedSnapshotRecordVersion = 2;
// Bounds a record group's reference must keep (else Corruption), checked
// before anything is allocated for it: a writer puts at most
// kMaxGroupRecords records in a group, and kMaxRecordGroupBytes is far above
// what 256 records need (about 40 bytes per chunk reference).
inline constexpr uint64_t kMaxGroupRecords = 256;
inline constexpr uint64_t kMaxRecordGroupBytes = uint64_t{256} << 20;
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

// A snapshot record's reference to a group of its tensor records.
struct RecordGroupRef {
  ChunkRef chunk;
  uint64_t first_param_id = 0;
  std::string first_role;
  uint64_t records = 0;
};

// The bytes a snapshot shares with others (SnapshotWriter::SetSharedManifest,
// store format version 6): inline in the snapshot record below
// kMinSharedManifestChunkBytes, else one chunk in the packs. At most
// kMaxRecordGroupBytes.
inline constexpr size_t kMinSharedManifestChunkBytes = 4096;
struct SharedManifestRef {
  std::string inline_bytes;       // the bytes, when stored in the snapshot record
  std::optional<ChunkRef> chunk;  // else the chunk holding them
};

struct SnapshotRecordData {
  SnapshotInfo info;
  std::string manifest;
  SharedManifestRef shared;
  bool grouped = false;               // format version 2: the records are in `groups`
  std::vector<RecordGroupRef> groups;  // in key order
};
// Format version 2 when `groups` is given (grouped), else 1. `shared` (may
// be null: none) goes into fields 7/8. info.manifest_bytes is not stored:
// parsing sets it to the manifest's size plus the inline shared bytes.
std::string SerializeSnapshotRecord(const SnapshotInfo& info, std::string_view manifest,
                                    const std::vector<RecordGroupRef>* groups = nullptr,
                                    const SharedManifestRef* shared = nullptr);
// Corruption when it does not parse, its step differs from `step`, a
// grouped record's groups are malformed (a chunk reference that is not 16
// bytes, an empty group, an empty first role, first keys not strictly
// increasing, group record counts not adding up to the tensor count), or its
// shared manifest is (both inline bytes and a chunk, a chunk hash that is not
// 16 bytes, a chunk of 0 or more than kMaxRecordGroupBytes raw bytes);
// NotSupported for an unknown format version.
Result<SnapshotRecordData> ParseSnapshotRecord(std::string_view value, int64_t step);

// The raw bytes of a record group (records in strictly increasing key order).
std::string SerializeRecordGroup(const std::vector<const TensorRecord*>& records);
// Parses a group's raw bytes and validates each record as ParseTensorRecord
// does; Corruption also when the keys are not strictly increasing or the
// group disagrees with `ref` (record count, first key).
Result<std::vector<TensorRecord>> ParseRecordGroup(std::string_view raw, const RecordGroupRef& ref);

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
