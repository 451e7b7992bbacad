#include "store/snapshot_writer.h"

#include <chrono>
#include <vector>

#include "store/chunk_codec.h"
#include "store/chunk_hash.h"
#include "store/kill_point.h"
#include "store/parallel_for.h"
#include "store/records.h"
#include "store/rocks_store.h"

namespace trainsnap::internal {
namespace {

// Shuffle planes per element: complex numbers are pairs of floats, whose
// bytes compress better when grouped by component width.
size_t ShuffleWidth(DType dtype) {
  switch (dtype) {
    case DType::kComplex64: return 4;
    case DType::kComplex128: return 8;
    default: return DTypeSize(dtype);
  }
}

std::string TensorName(uint64_t param_id, std::string_view role) {
  return "tensor param_id " + std::to_string(param_id) + " role " + std::string(role);
}

}  // namespace

SnapshotWriterImpl::SnapshotWriterImpl(RocksStore* store, int64_t step, SnapshotOptions options)
    : store_(store), step_(step), options_(options) {}

SnapshotWriterImpl::~SnapshotWriterImpl() {
  std::vector<ChunkHash> pinned;
  pinned.reserve(seen_.size());
  for (const auto& [hash, size] : seen_) pinned.push_back(hash);
  store_->registry().Unpin(pinned);
}

void SnapshotWriterImpl::SetManifest(std::string bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  manifest_ = std::move(bytes);
}

Status SnapshotWriterImpl::AddChunk(const uint8_t* data, size_t size, size_t element_size, ChunkRef* ref) {
  ref->hash = HashChunk(data, size);
  ref->raw_bytes = size;
  bool first_use = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = seen_.try_emplace(ref->hash, 0);
    if (!inserted && it->second != 0) {
      ref->stored_bytes = it->second;
      return Status::OK();
    }
    first_use = inserted;
  }
  // Pin before looking the chunk up, so that a concurrent GC cannot delete
  // the chunk between our existence check and our commit.
  std::optional<uint64_t> stored =
      first_use ? store_->registry().PinAndLookup(ref->hash) : std::optional<uint64_t>();
  bool is_new = false;
  if (!stored) {
    TRAINSNAP_ASSIGN_OR_RETURN(stored, store_->LookupChunk(ref->hash));
  }
  if (!stored) {
    ChunkEncodeOptions encode;
    encode.zstd_level = store_->zstd_level();
    encode.element_size = element_size;
    std::string encoded;
    TRAINSNAP_RETURN_IF_ERROR(EncodeChunk(data, size, encode, &encoded));
    TRAINSNAP_RETURN_IF_ERROR(store_->PutChunk(ref->hash, encoded));
    stored = encoded.size();
    store_->registry().NoteStored(ref->hash, *stored);
    is_new = true;
  }
  ref->stored_bytes = *stored;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t& known = seen_[ref->hash];
  if (known == 0) known = *stored;
  // Two threads of this writer may race on the same chunk (both write it, or
  // one finds the other's write): count it once.
  if (is_new && new_hashes_.insert(ref->hash).second) {
    ++new_chunks_;
    new_bytes_ += *stored;
  }
  return Status::OK();
}

Status SnapshotWriterImpl::AddTensor(const TensorView& tensor) {
  const std::string name = TensorName(tensor.param_id, tensor.role);
  auto fail = [&](Status s) { return s.WithContext("snapshot step " + std::to_string(step_) + ": " + name); };
  if (tensor.role.empty()) return fail(Status::InvalidArgument("empty role"));
  auto expected = CheckedTensorBytes(static_cast<uint32_t>(tensor.dtype), tensor.shape);
  if (!expected.ok()) return fail(expected.status());
  if (*expected != tensor.size_bytes) {
    return fail(Status::InvalidArgument("size_bytes " + std::to_string(tensor.size_bytes) +
                                        " differs from numel(shape) * itemsize = " + std::to_string(*expected)));
  }
  if (tensor.size_bytes > 0 && tensor.data == nullptr) return fail(Status::InvalidArgument("null data"));
  const auto key = std::make_pair(tensor.param_id, tensor.role);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (committed_) return fail(Status::InvalidArgument("the snapshot is already committed"));
    if (!records_.try_emplace(key).second) return fail(Status::InvalidArgument("added twice"));
  }

  TensorRecord record;
  record.param_id = tensor.param_id;
  record.role = tensor.role;
  record.dtype = tensor.dtype;
  record.shape = tensor.shape;
  record.bytes = tensor.size_bytes;
  const size_t element_size = DTypeSize(tensor.dtype);
  const size_t chunk = std::max(element_size, store_->chunk_bytes() / element_size * element_size);
  const size_t n = (tensor.size_bytes + chunk - 1) / chunk;
  record.chunks.resize(n);
  const auto* base = static_cast<const uint8_t*>(tensor.data);
  Status s = ParallelFor(store_->pool(), n, [&](size_t i) {
    const size_t offset = i * chunk;
    const size_t size = std::min(chunk, tensor.size_bytes - offset);
    return AddChunk(base + offset, size, ShuffleWidth(tensor.dtype), &record.chunks[i]);
  });

  std::lock_guard<std::mutex> lock(mu_);
  if (!s.ok()) {
    // The snapshot would lack this tensor: refuse to commit it.
    records_.erase(key);
    failed_ = true;
    if (first_error_.ok()) first_error_ = fail(s);
    return fail(s);
  }
  records_[key] = std::move(record);
  return Status::OK();
}

Result<SnapshotInfo> SnapshotWriterImpl::Commit() {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string context = "commit snapshot step " + std::to_string(step_);
  if (committed_) return Status::InvalidArgument(context + ": already committed");
  if (failed_) return Status::Aborted(context + ": an AddTensor failed: " + first_error_.ToString());
  TRAINSNAP_KILL_POINT(kKillAfterChunks);
  SnapshotInfo info;
  info.step = step_;
  info.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  std::vector<TensorRecord> records;
  records.reserve(records_.size());
  for (auto& [key, record] : records_) {
    info.tensors += 1;
    info.logical_bytes += record.bytes;
    info.chunks += record.chunks.size();
    for (const ChunkRef& c : record.chunks) info.stored_bytes += c.stored_bytes;
    records.push_back(record);
  }
  info.new_chunks = new_chunks_;
  info.new_bytes = new_bytes_;
  auto committed = store_->CommitSnapshot(info, records, manifest_, options_.replace_existing);
  if (!committed.ok()) return committed.status().WithContext(context);
  committed_ = true;
  return committed;
}

}  // namespace trainsnap::internal
