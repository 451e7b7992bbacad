// libFuzzer target: the record parsers of the store (src/store/records.h,
// src/store/keys.h) and the checkpointer's manifest message, on arbitrary
// bytes. Parsed records must be self-consistent and survive a round trip.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "manifest.pb.h"
#include "store/keys.h"
#include "store/records.h"

using namespace trainsnap;
using namespace trainsnap::internal;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto record = ParseTensorRecord(bytes, 7, "param");
  if (record.ok()) {
    // The validation promised by records.h: sizes add up, no overflow.
    uint64_t sum = 0;
    for (const ChunkRef& c : record->chunks) sum += c.raw_bytes;
    if (sum != record->bytes) std::abort();
    auto expected = CheckedTensorBytes(static_cast<uint32_t>(record->dtype), record->shape);
    if (!expected.ok() || *expected != record->bytes) std::abort();
    auto again = ParseTensorRecord(SerializeTensorRecord(*record), 7, "param");
    if (!again.ok() || again->bytes != record->bytes || again->shape != record->shape ||
        again->chunks.size() != record->chunks.size()) {
      std::abort();
    }
  }
  int64_t step = 0;
  if (size >= 8) std::memcpy(&step, data, 8);
  auto snapshot = ParseSnapshotRecord(bytes, step);
  if (snapshot.ok()) {
    if (snapshot->info.step != step) std::abort();
    auto again = ParseSnapshotRecord(SerializeSnapshotRecord(snapshot->info, snapshot->manifest), step);
    if (!again.ok() || again->manifest != snapshot->manifest) std::abort();
  }
  // Keys: decode, and re-encode what decodes.
  if (auto s = DecodeStepKey(bytes); s.ok() && EncodeStepKey(*s) != bytes) std::abort();
  if (auto t = DecodeTensorKey(bytes); t.ok() && EncodeTensorKey(t->step, t->param_id, t->role) != bytes) std::abort();
  if (auto c = DecodeChunkKey(bytes); c.ok() && EncodeChunkKey(*c) != bytes) std::abort();
  // The checkpointer's manifest is a protobuf message stored opaque.
  trainsnap::proto::TrainingManifest manifest;
  if (manifest.ParseFromArray(data, static_cast<int>(size))) (void)manifest.ByteSizeLong();
  return 0;
}
