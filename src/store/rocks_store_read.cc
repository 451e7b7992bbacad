// Chunk reads: decoding (delta chains included) into the caller's buffers,
// every chunk checked against its hash.
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"

#include <algorithm>

#include "store/chunk_codec.h"
#include "store/chunk_hash.h"
#include "store/keys.h"
#include "store/parallel_for.h"
#include "store/rocksdb_status.h"

namespace trainsnap::internal {

Status RocksStore::ReadChunkInto(const ChunkRef& ref, std::string_view value, uint8_t* dst,
                                 std::optional<std::string_view> base_value) {
  auto header = ParseChunkHeader(value);
  if (!header.ok()) return header.status().WithContext("chunk " + ref.hash.Hex());
  std::vector<uint8_t> base;
  if (header->filter == ChunkFilter::kXorDelta) {
    // The base is read and checked like any chunk; its chain is one shorter,
    // so the recursion ends (at most kMaxDeltaDepth levels).
    const std::string where = "delta chunk " + ref.hash.Hex() + " (depth " +
                              std::to_string(header->delta_depth) + "): base " + header->base.Hex();
    rocksdb::PinnableSlice read_value;
    if (!base_value) {
      rocksdb::Status s = db_->Get(ChunkReadOptions(), chunks_cf_, EncodeChunkKey(header->base), &read_value);
      if (s.IsNotFound()) return Status::Corruption(where + ": missing from the store");
      if (!s.ok()) return FromRocks(s, where);
      base_value = std::string_view(read_value.data(), read_value.size());
    }
    auto base_header = ParseChunkHeader(*base_value);
    if (!base_header.ok()) return base_header.status().WithContext(where);
    const uint8_t base_depth = base_header->filter == ChunkFilter::kXorDelta ? base_header->delta_depth : 0;
    if (base_depth + 1 != header->delta_depth) {
      return Status::Corruption(where + ": has chain depth " + std::to_string(base_depth) + ", expected " +
                                std::to_string(header->delta_depth - 1));
    }
    base.resize(ref.raw_bytes);
    ChunkRef base_ref;
    base_ref.hash = header->base;
    base_ref.raw_bytes = ref.raw_bytes;
    TRAINSNAP_RETURN_IF_ERROR(ReadChunkInto(base_ref, *base_value, base.data()).WithContext(where));
  }
  Status s = DecodeChunk(value, dst, ref.raw_bytes, base.empty() ? nullptr : base.data());
  if (!s.ok()) return s.WithContext("chunk " + ref.hash.Hex());
  if (!(HashChunk(dst, ref.raw_bytes) == ref.hash)) {
    return Status::Corruption("chunk " + ref.hash.Hex() + ": hash mismatch");
  }
  return Status::OK();
}

Status RocksStore::ReadTensor(const TensorRecord& record, void* dst, size_t dst_bytes) {
  TensorRead read;
  read.record = &record;
  read.dst = dst;
  read.dst_bytes = dst_bytes;
  return ReadTensors({read});
}

Status RocksStore::ReadTensors(const std::vector<TensorRead>& reads) {
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(AcquireView(&view_lock));
  std::vector<ChunkRead> chunks;
  for (size_t i = 0; i < reads.size(); ++i) {
    const TensorRead& r = reads[i];
    if (r.record == nullptr) return Status::InvalidArgument("read tensor " + std::to_string(i) + ": null record");
    const TensorRecord& record = *r.record;
    if (r.dst_bytes != record.bytes) {
      return Status::InvalidArgument(ReadName(r) + ": destination has " + std::to_string(r.dst_bytes) +
                                     " bytes, tensor has " + std::to_string(record.bytes));
    }
    uint64_t total = 0;
    for (const ChunkRef& c : record.chunks) total += c.raw_bytes;
    if (total != record.bytes) return Status::InvalidArgument(ReadName(r) + ": chunk lengths do not add up to its bytes");
    if (record.bytes > 0 && r.dst == nullptr) return Status::InvalidArgument(ReadName(r) + ": null destination");
    auto* out = static_cast<uint8_t*>(r.dst);
    uint64_t offset = 0;
    for (size_t c = 0; c < record.chunks.size(); offset += record.chunks[c].raw_bytes, ++c) {
      chunks.push_back({&record.chunks[c], out + offset, i, c});
    }
  }
  // Contiguous batches of at most kReadBatch chunks (which bounds the values
  // and delta bases pinned at once to 2 x kReadBatch chunks per thread), and
  // at least two per worker so that the threads finish together. Measured
  // (bench/README.md): batches of 1, 2, 4 or 8 restore equally fast from the
  // page cache; MultiGet saves lookups, not decode time.
  constexpr size_t kReadBatch = 4;
  const size_t tasks = 2 * static_cast<size_t>(threads_);
  const size_t batch = std::clamp<size_t>((chunks.size() + tasks - 1) / tasks, 1, kReadBatch);
  const size_t batches = (chunks.size() + batch - 1) / batch;
  std::vector<Status> errors(reads.size());
  std::mutex errors_mu;
  TRAINSNAP_RETURN_IF_ERROR(ParallelFor(*pool_, batches, [&](size_t b) {
    ReadChunkBatch(chunks, b * batch, std::min(chunks.size(), (b + 1) * batch), reads, &errors, &errors_mu);
    return Status::OK();
  }));
  for (const Status& error : errors) TRAINSNAP_RETURN_IF_ERROR(error);
  return Status::OK();
}

void RocksStore::ReadChunkBatch(const std::vector<ChunkRead>& chunks, size_t begin, size_t end,
                                const std::vector<TensorRead>& reads, std::vector<Status>* errors,
                                std::mutex* errors_mu) {
  auto fail = [&](const ChunkRead& c, Status status) {
    std::lock_guard<std::mutex> lock(*errors_mu);
    Status& slot = (*errors)[c.read];
    if (slot.ok()) slot = status.WithContext(ReadName(reads[c.read]) + ": chunk " + std::to_string(c.index));
  };
  const size_t n = end - begin;
  std::vector<std::string> keys(n);
  std::vector<rocksdb::Slice> key_slices(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = EncodeChunkKey(chunks[begin + i].ref->hash);
    key_slices[i] = keys[i];
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> statuses(n);
  db_->MultiGet(ChunkReadOptions(), chunks_cf_, n, key_slices.data(), values.data(), statuses.data());

  // The bases of the delta chunks, fetched together; a base that cannot be
  // read here is read again (and its error reported) by ReadChunkInto.
  std::vector<std::string> base_keys;
  std::vector<size_t> base_of(n, SIZE_MAX);
  for (size_t i = 0; i < n; ++i) {
    if (!statuses[i].ok()) continue;
    auto header = ParseChunkHeader(std::string_view(values[i].data(), values[i].size()));
    if (!header.ok() || header->filter != ChunkFilter::kXorDelta) continue;
    std::string key = EncodeChunkKey(header->base);
    auto same = std::find(base_keys.begin(), base_keys.end(), key);
    base_of[i] = static_cast<size_t>(same - base_keys.begin());
    if (same == base_keys.end()) base_keys.push_back(std::move(key));
  }
  std::vector<rocksdb::PinnableSlice> base_values(base_keys.size());
  std::vector<rocksdb::Status> base_statuses(base_keys.size());
  if (!base_keys.empty()) {
    std::vector<rocksdb::Slice> base_slices(base_keys.begin(), base_keys.end());
    db_->MultiGet(ChunkReadOptions(), chunks_cf_, base_keys.size(), base_slices.data(), base_values.data(),
                  base_statuses.data());
  }

  for (size_t i = 0; i < n; ++i) {
    const ChunkRead& c = chunks[begin + i];
    if (statuses[i].IsNotFound()) {
      fail(c, Status::Corruption(c.ref->hash.Hex() + ": referenced but missing from the store"));
      continue;
    }
    if (!statuses[i].ok()) {
      fail(c, FromRocks(statuses[i], c.ref->hash.Hex()));
      continue;
    }
    std::optional<std::string_view> base;
    if (base_of[i] != SIZE_MAX && base_statuses[base_of[i]].ok()) {
      base = std::string_view(base_values[base_of[i]].data(), base_values[base_of[i]].size());
    }
    Status s = ReadChunkInto(*c.ref, std::string_view(values[i].data(), values[i].size()), c.dst, base);
    if (!s.ok()) fail(c, std::move(s));
  }
}

}  // namespace trainsnap::internal
