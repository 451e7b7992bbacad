#include "store/records.h"

#include "store.pb.h"

namespace trainsnap::internal {

Result<uint64_t> CheckedTensorBytes(uint32_t dtype, const std::vector<int64_t>& shape) {
  if (!IsValidDType(dtype)) return Status::InvalidArgument("unknown dtype code " + std::to_string(dtype));
  uint64_t bytes = DTypeSize(static_cast<DType>(dtype));
  for (int64_t d : shape) {
    if (d < 0) return Status::InvalidArgument("negative dimension " + std::to_string(d));
    if (d != 0 && bytes > UINT64_MAX / static_cast<uint64_t>(d)) {
      return Status::InvalidArgument("tensor size overflows 64 bits");
    }
    bytes *= static_cast<uint64_t>(d);
  }
  return bytes;
}

std::string SerializeTensorRecord(const TensorRecord& record) {
  proto::TensorRecordProto p;
  p.set_dtype(static_cast<uint32_t>(record.dtype));
  for (int64_t d : record.shape) p.add_shape(d);
  p.set_bytes(record.bytes);
  for (const ChunkRef& c : record.chunks) {
    proto::ChunkRefRecord* r = p.add_chunks();
    r->set_hash(reinterpret_cast<const char*>(c.hash.bytes.data()), c.hash.bytes.size());
    r->set_raw_bytes(c.raw_bytes);
    r->set_stored_bytes(c.stored_bytes);
  }
  return p.SerializeAsString();
}

Result<TensorRecord> ParseTensorRecord(std::string_view value, uint64_t param_id, std::string role) {
  proto::TensorRecordProto p;
  if (!p.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
    return Status::Corruption("tensor record does not parse");
  }
  TensorRecord out;
  out.param_id = param_id;
  out.role = std::move(role);
  out.shape.assign(p.shape().begin(), p.shape().end());
  auto bytes = CheckedTensorBytes(p.dtype(), out.shape);
  if (!bytes.ok()) return Status::Corruption("tensor record: " + bytes.status().message());
  if (*bytes != p.bytes()) {
    return Status::Corruption("tensor record: " + std::to_string(p.bytes()) + " bytes but shape and dtype give " +
                              std::to_string(*bytes));
  }
  out.dtype = static_cast<DType>(p.dtype());
  out.bytes = p.bytes();
  uint64_t sum = 0;
  out.chunks.reserve(p.chunks_size());
  for (const proto::ChunkRefRecord& r : p.chunks()) {
    if (r.hash().size() != 16) return Status::Corruption("tensor record: chunk hash is not 16 bytes");
    ChunkRef c;
    std::copy(r.hash().begin(), r.hash().end(), c.hash.bytes.begin());
    c.raw_bytes = r.raw_bytes();
    c.stored_bytes = r.stored_bytes();
    if (c.raw_bytes == 0 || sum + c.raw_bytes < sum) {
      return Status::Corruption("tensor record: bad chunk length");
    }
    sum += c.raw_bytes;
    out.chunks.push_back(c);
  }
  if (sum != out.bytes) {
    return Status::Corruption("tensor record: chunks hold " + std::to_string(sum) + " bytes, tensor has " +
                              std::to_string(out.bytes));
  }
  return out;
}

std::string SerializeSnapshotRecord(const SnapshotInfo& info, std::string_view manifest) {
  proto::SnapshotRecord p;
  p.set_format_version(kStoreFormatVersion);
  p.set_step(info.step);
  p.set_created_unix_ms(info.created_unix_ms);
  proto::SnapshotStats* s = p.mutable_stats();
  s->set_tensors(info.tensors);
  s->set_logical_bytes(info.logical_bytes);
  s->set_chunks(info.chunks);
  s->set_stored_bytes(info.stored_bytes);
  s->set_new_chunks(info.new_chunks);
  s->set_new_bytes(info.new_bytes);
  p.set_manifest(manifest.data(), manifest.size());
  return p.SerializeAsString();
}

Result<SnapshotRecordData> ParseSnapshotRecord(std::string_view value, int64_t step) {
  proto::SnapshotRecord p;
  if (!p.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
    return Status::Corruption("snapshot record does not parse");
  }
  if (p.format_version() != kStoreFormatVersion) {
    return Status::NotSupported("snapshot record has format version " + std::to_string(p.format_version()) +
                                "; this build reads version " + std::to_string(kStoreFormatVersion));
  }
  if (p.step() != step) {
    return Status::Corruption("snapshot record holds step " + std::to_string(p.step()) + " under the key of step " +
                              std::to_string(step));
  }
  SnapshotRecordData out;
  out.info.step = p.step();
  out.info.created_unix_ms = p.created_unix_ms();
  out.info.tensors = p.stats().tensors();
  out.info.logical_bytes = p.stats().logical_bytes();
  out.info.chunks = p.stats().chunks();
  out.info.stored_bytes = p.stats().stored_bytes();
  out.info.new_chunks = p.stats().new_chunks();
  out.info.new_bytes = p.stats().new_bytes();
  out.info.manifest_bytes = p.manifest().size();
  out.manifest = p.manifest();
  return out;
}

std::string SerializeStoreCounts(const StoreCountsData& counts) {
  proto::StoreCounts p;
  p.set_snapshots(counts.snapshots);
  p.set_transactions(counts.transactions);
  p.set_newest_step(counts.newest_step.value_or(0));
  return p.SerializeAsString();
}

Result<StoreCountsData> ParseStoreCounts(std::string_view value) {
  proto::StoreCounts p;
  if (!p.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
    return Status::Corruption("counts record does not parse");
  }
  StoreCountsData out;
  out.snapshots = p.snapshots();
  out.transactions = p.transactions();
  if (out.snapshots > 0) out.newest_step = p.newest_step();
  return out;
}

}  // namespace trainsnap::internal
