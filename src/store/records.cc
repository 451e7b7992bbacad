#include "store/records.h"

#include <algorithm>

#include <google/protobuf/arena.h>

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

namespace {

// Parses a tensor record value into `p` (cleared first: a message reused
// for many records keeps its fields' memory) and validates it into a record.
Result<TensorRecord> ParseTensorRecordWith(proto::TensorRecordProto& p, std::string_view value, uint64_t param_id,
                                           std::string role) {
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

}  // namespace

Result<TensorRecord> ParseTensorRecord(std::string_view value, uint64_t param_id, std::string role) {
  proto::TensorRecordProto p;
  return ParseTensorRecordWith(p, value, param_id, std::move(role));
}

namespace {

void ToProto(const ChunkRef& c, proto::ChunkRefRecord* r) {
  r->set_hash(reinterpret_cast<const char*>(c.hash.bytes.data()), c.hash.bytes.size());
  r->set_raw_bytes(c.raw_bytes);
  r->set_stored_bytes(c.stored_bytes);
}

bool KeyLess(uint64_t a_id, std::string_view a_role, uint64_t b_id, std::string_view b_role) {
  return a_id != b_id ? a_id < b_id : a_role < b_role;
}

}  // namespace

std::string SerializeRecordGroup(const std::vector<const TensorRecord*>& records) {
  proto::TensorRecordGroup g;
  for (const TensorRecord* r : records) {
    proto::GroupedTensorRecord* out = g.add_records();
    out->set_param_id(r->param_id);
    out->set_role(r->role);
    out->set_record(SerializeTensorRecord(*r));
  }
  return g.SerializeAsString();
}

Result<std::vector<TensorRecord>> ParseRecordGroup(std::string_view raw, const RecordGroupRef& ref) {
  auto where = [&ref] { return "record group " + ref.chunk.hash.Hex(); };
  // The group's messages (two strings each) on an arena, and one record
  // message reused for every record: a dozen mallocs and frees per record
  // were a third of a 50,000-parameter restore, growing faster than the
  // record count as the heap fragmented.
  google::protobuf::ArenaOptions options;
  options.start_block_size = std::min<size_t>(raw.size() * 2 + 4096, size_t{1} << 20);
  options.max_block_size = size_t{1} << 20;
  google::protobuf::Arena arena(options);
  proto::TensorRecordGroup& g = *google::protobuf::Arena::CreateMessage<proto::TensorRecordGroup>(&arena);
  if (!g.ParseFromArray(raw.data(), static_cast<int>(raw.size()))) {
    return Status::Corruption(where() + " does not parse");
  }
  if (static_cast<uint64_t>(g.records_size()) != ref.records) {
    return Status::Corruption(where() + " holds " + std::to_string(g.records_size()) +
                              " records, the snapshot record says " + std::to_string(ref.records));
  }
  std::vector<TensorRecord> out;
  out.reserve(g.records_size());
  proto::TensorRecordProto& scratch = *google::protobuf::Arena::CreateMessage<proto::TensorRecordProto>(&arena);
  for (const proto::GroupedTensorRecord& r : g.records()) {
    if (r.role().empty()) return Status::Corruption(where() + ": a record with an empty role");
    if (!out.empty() && !KeyLess(out.back().param_id, out.back().role, r.param_id(), r.role())) {
      return Status::Corruption(where() + ": records out of key order");
    }
    auto record = ParseTensorRecordWith(scratch, r.record(), r.param_id(), r.role());
    if (!record.ok()) return record.status().WithContext(where() + ": param_id " + std::to_string(r.param_id()) +
                                                         " role " + r.role());
    out.push_back(std::move(*record));
  }
  if (out.empty() || out.front().param_id != ref.first_param_id || out.front().role != ref.first_role) {
    return Status::Corruption(where() + ": first record differs from the snapshot record's key");
  }
  return out;
}

std::string SerializeSnapshotRecord(const SnapshotInfo& info, std::string_view manifest,
                                    const std::vector<RecordGroupRef>* groups, const SharedManifestRef* shared) {
  proto::SnapshotRecord p;
  p.set_format_version(groups ? kGroupedSnapshotRecordVersion : kPlainSnapshotRecordVersion);
  if (groups) {
    for (const RecordGroupRef& g : *groups) {
      proto::RecordGroupRef* r = p.add_record_groups();
      ToProto(g.chunk, r->mutable_chunk());
      r->set_first_param_id(g.first_param_id);
      r->set_first_role(g.first_role);
      r->set_records(g.records);
    }
  }
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
  if (shared != nullptr) {
    if (shared->chunk) {
      ToProto(*shared->chunk, p.mutable_shared_manifest_chunk());
    } else {
      p.set_shared_manifest(shared->inline_bytes);
    }
  }
  return p.SerializeAsString();
}

Result<SnapshotRecordData> ParseSnapshotRecord(std::string_view value, int64_t step) {
  proto::SnapshotRecord p;
  if (!p.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
    return Status::Corruption("snapshot record does not parse");
  }
  if (p.format_version() != kPlainSnapshotRecordVersion && p.format_version() != kGroupedSnapshotRecordVersion) {
    return Status::NotSupported("snapshot record has format version " + std::to_string(p.format_version()) +
                                "; this build reads versions " + std::to_string(kPlainSnapshotRecordVersion) + " and " +
                                std::to_string(kGroupedSnapshotRecordVersion));
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
  out.info.manifest_bytes = p.manifest().size() + p.shared_manifest().size();
  out.manifest = p.manifest();
  if (p.has_shared_manifest_chunk()) {
    const proto::ChunkRefRecord& c = p.shared_manifest_chunk();
    if (!p.shared_manifest().empty()) return Status::Corruption("shared manifest both inline and in a chunk");
    if (c.hash().size() != 16) return Status::Corruption("shared manifest: chunk hash is not 16 bytes");
    ChunkRef ref;
    std::copy(c.hash().begin(), c.hash().end(), ref.hash.bytes.begin());
    ref.raw_bytes = c.raw_bytes();
    ref.stored_bytes = c.stored_bytes();
    if (ref.raw_bytes == 0 || ref.raw_bytes > kMaxRecordGroupBytes) {
      return Status::Corruption("shared manifest " + ref.hash.Hex() + ": " + std::to_string(ref.raw_bytes) +
                                " bytes, outside 1.." + std::to_string(kMaxRecordGroupBytes));
    }
    out.shared.chunk = ref;
  } else {
    out.shared.inline_bytes = p.shared_manifest();
  }
  out.grouped = p.format_version() == kGroupedSnapshotRecordVersion;
  if (!out.grouped && p.record_groups_size() > 0) {
    return Status::Corruption("snapshot record of format version 1 lists record groups");
  }
  uint64_t records = 0;
  for (const proto::RecordGroupRef& r : p.record_groups()) {
    RecordGroupRef g;
    if (r.chunk().hash().size() != 16) return Status::Corruption("record group: chunk hash is not 16 bytes");
    std::copy(r.chunk().hash().begin(), r.chunk().hash().end(), g.chunk.hash.bytes.begin());
    g.chunk.raw_bytes = r.chunk().raw_bytes();
    g.chunk.stored_bytes = r.chunk().stored_bytes();
    g.first_param_id = r.first_param_id();
    g.first_role = r.first_role();
    g.records = r.records();
    if (g.records == 0 || g.first_role.empty() || g.chunk.raw_bytes == 0) {
      return Status::Corruption("record group " + g.chunk.hash.Hex() + ": empty");
    }
    if (g.records > kMaxGroupRecords || g.chunk.raw_bytes > kMaxRecordGroupBytes) {
      return Status::Corruption("record group " + g.chunk.hash.Hex() + ": " + std::to_string(g.records) +
                                " records in " + std::to_string(g.chunk.raw_bytes) + " bytes, above the bounds (" +
                                std::to_string(kMaxGroupRecords) + ", " + std::to_string(kMaxRecordGroupBytes) + ")");
    }
    if (!out.groups.empty() &&
        !KeyLess(out.groups.back().first_param_id, out.groups.back().first_role, g.first_param_id, g.first_role)) {
      return Status::Corruption("record groups out of key order");
    }
    records += g.records;
    out.groups.push_back(std::move(g));
  }
  if (out.grouped && records != out.info.tensors) {
    return Status::Corruption("snapshot record lists " + std::to_string(out.info.tensors) + " tensors but its groups " +
                              std::to_string(records) + " records");
  }
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
