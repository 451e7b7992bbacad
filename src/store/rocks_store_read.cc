// Chunk reads: decoding (delta chains included) into the caller's buffers,
// every chunk checked against its hash.
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"

#include <algorithm>
#include <memory>

#include "store/chunk_codec.h"
#include "store/chunk_hash.h"
#include "store/keys.h"
#include "store/pack_entry.h"
#include "store/parallel_for.h"
#include "store/rocksdb_status.h"

namespace trainsnap::internal {

Result<std::optional<PackEntry>> RocksStore::LookupEntry(const ChunkHash& hash, const rocksdb::ReadOptions& ro) {
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db_->Get(ro, chunks_cf_, EncodeChunkKey(hash), &value);
  if (s.IsNotFound()) return std::optional<PackEntry>();
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "chunk " + hash.Hex() + ": read its index entry"));
  auto entry = ParsePackEntry(std::string_view(value.data(), value.size()));
  if (!entry.ok()) return entry.status().WithContext("chunk " + hash.Hex());
  return std::optional<PackEntry>(*entry);
}

Status RocksStore::ReadChunkValue(const ChunkHash& hash, const rocksdb::ReadOptions& ro, std::string* out) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::optional<PackEntry> entry, LookupEntry(hash, ro));
  if (!entry) return Status::Corruption("chunk " + hash.Hex() + ": referenced but missing from the store");
  Status s = packs_->ReadEncoded(*entry, out);
  if (s.ok()) return s;
  // A compaction may have moved the chunk since `ro`'s view: read it where
  // the index names it now (the same bytes: the hash names them).
  auto moved = LookupEntry(hash, rocksdb::ReadOptions());
  if (!moved.ok() || !moved->has_value() || **moved == *entry) return s.WithContext("chunk " + hash.Hex());
  return packs_->ReadEncoded(**moved, out).WithContext("chunk " + hash.Hex());
}

Status RocksStore::ReadChunkAt(const ChunkRef& ref, PackEntry entry, uint8_t* dst) {
  if (entry.raw_bytes != ref.raw_bytes) {
    return Status::Corruption("chunk " + ref.hash.Hex() + ": the index records " + std::to_string(entry.raw_bytes) +
                              " raw bytes, the tensor record " + std::to_string(ref.raw_bytes));
  }
  thread_local std::string buffer;
  auto read = [&](const PackEntry& e) {
    return e.raw ? packs_->ReadRawInto(e, dst) : packs_->ReadEncoded(e, &buffer);
  };
  Status s = read(entry);
  if (!s.ok()) {
    // See ReadChunkValue: retry once where a compaction moved the chunk.
    auto moved = LookupEntry(ref.hash, rocksdb::ReadOptions());
    if (!moved.ok() || !moved->has_value() || **moved == entry) return s.WithContext("chunk " + ref.hash.Hex());
    entry = **moved;
    if (entry.raw_bytes != ref.raw_bytes) return s.WithContext("chunk " + ref.hash.Hex());
    TRAINSNAP_RETURN_IF_ERROR(read(entry).WithContext("chunk " + ref.hash.Hex()));
  }
  if (!entry.raw) return ReadChunkInto(ref, buffer, dst);
  if (!(HashChunk(dst, ref.raw_bytes) == ref.hash)) {
    return Status::Corruption("chunk " + ref.hash.Hex() + ": hash mismatch");
  }
  return Status::OK();
}

Status RocksStore::ReadChunkInto(const ChunkRef& ref, std::string_view value, uint8_t* dst, int depth_budget) {
  auto header = ParseChunkHeader(value);
  if (!header.ok()) return header.status().WithContext("chunk " + ref.hash.Hex());
  // The base's decoded bytes; uninitialised (DecodeChunk writes every byte):
  // zero-filling a base per delta chunk cost a memset of the chunk's size.
  std::unique_ptr<uint8_t[]> base;
  if (header->filter == ChunkFilter::kXorDelta) {
    // The base is read and checked like any chunk (its bytes are what the
    // hash names, whichever encoding the index holds); the budget ends the
    // recursion.
    const std::string where = "delta chunk " + ref.hash.Hex() + " (depth " +
                              std::to_string(header->delta_depth) + "): base " + header->base.Hex();
    auto base_entry = LookupEntry(header->base, ChunkReadOptions());
    if (!base_entry.ok()) return base_entry.status().WithContext(where);
    if (!base_entry->has_value()) return Status::Corruption(where + ": missing from the store");
    std::string base_value;
    Status read = ReadChunkValue(header->base, ChunkReadOptions(), &base_value);
    if (!read.ok()) return read.WithContext(where);
    auto base_header = ParseChunkHeader(base_value);
    if (!base_header.ok()) return base_header.status().WithContext(where);
    if (depth_budget <= 0) {
      return Status::Corruption(where + ": delta chain longer than " + std::to_string(kMaxDeltaDepth) +
                                " links (a cycle)");
    }
    base.reset(new uint8_t[ref.raw_bytes]);
    ChunkRef base_ref;
    base_ref.hash = header->base;
    base_ref.raw_bytes = ref.raw_bytes;
    TRAINSNAP_RETURN_IF_ERROR(ReadChunkInto(base_ref, base_value, base.get(), depth_budget - 1).WithContext(where));
  }
  Status s = DecodeChunk(value, dst, ref.raw_bytes, base.get());
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
    auto entry = ParsePackEntry(std::string_view(values[i].data(), values[i].size()));
    if (!entry.ok()) {
      fail(c, entry.status().WithContext("chunk " + c.ref->hash.Hex()));
      continue;
    }
    Status s = ReadChunkAt(*c.ref, *entry, c.dst);
    if (!s.ok()) fail(c, std::move(s));
  }
}

}  // namespace trainsnap::internal
