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

Status RocksStore::ChunkGone(const ChunkHash& hash) {
  return Status::NotFound("chunk " + hash.Hex() +
                          ": no longer stored: a writer deleted it, with the snapshots that referenced it, since "
                          "this store read them (Refresh() a read-only store to see it as it is now)");
}

Status RocksStore::ReadChunkValue(const ChunkHash& hash, const rocksdb::ReadOptions& ro, std::string* out) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::optional<PackEntry> entry, LookupEntry(hash, ro));
  if (!entry) return Status::Corruption("chunk " + hash.Hex() + ": referenced but missing from the store");
  Status s = packs_->ReadEncoded(*entry, out);
  if (s.ok()) return s;
  // A compaction may have moved the chunk since `ro`'s view, or a
  // collection deleted it: read it where the index names it now (the same
  // bytes: the hash names them).
  auto now = CurrentEntry(hash, *entry);
  if (now.ok() && !now->has_value()) return ChunkGone(hash);
  if (!now.ok() || **now == *entry) {
    NoteFailedRead(hash, *entry, ReadFailure::kPack);
    return s.WithContext("chunk " + hash.Hex());
  }
  return packs_->ReadEncoded(**now, out).WithContext("chunk " + hash.Hex());
}

Status RocksStore::ReadAndCheck(const ChunkRef& ref, const PackEntry& entry, uint8_t* dst, ReadFailure* failure) {
  *failure = ReadFailure::kPack;
  thread_local std::string buffer;
  Status read = entry.raw ? packs_->ReadRawInto(entry, dst) : packs_->ReadEncoded(entry, &buffer);
  if (!read.ok()) return read.WithContext("chunk " + ref.hash.Hex());
  *failure = ReadFailure::kContent;
  if (!entry.raw) return ReadChunkInto(ref, buffer, dst);
  if (!(HashChunk(dst, ref.raw_bytes) == ref.hash)) {
    return Status::Corruption("chunk " + ref.hash.Hex() + ": hash mismatch");
  }
  return Status::OK();
}

Status RocksStore::ReadChunkAt(const ChunkRef& ref, PackEntry entry, uint8_t* dst) {
  if (entry.raw_bytes != ref.raw_bytes) {
    return Status::Corruption("chunk " + ref.hash.Hex() + ": the index records " + std::to_string(entry.raw_bytes) +
                              " raw bytes, the tensor record " + std::to_string(ref.raw_bytes));
  }
  ReadFailure failure;
  Status s = ReadAndCheck(ref, entry, dst, &failure);
  if (s.ok()) return s;
  // See ReadChunkValue: once more where the index names the chunk now. A
  // read-only store's view may also name a place the writer has since
  // reused (its bytes then fail the hash): that is looked up again too.
  auto now = CurrentEntry(ref.hash, entry);
  if (now.ok() && !now->has_value()) return ChunkGone(ref.hash);
  if (!now.ok() || **now == entry || (*now)->raw_bytes != ref.raw_bytes) {
    NoteFailedRead(ref.hash, entry, failure);
    return s;
  }
  entry = **now;
  s = ReadAndCheck(ref, entry, dst, &failure);
  if (!s.ok()) NoteFailedRead(ref.hash, entry, failure);
  return s;
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

namespace trainsnap::internal {

Result<std::shared_ptr<RocksStore::LatestView>> RocksStore::NewerView(uint64_t since) {
  // Opened under latest_mu_: a view whose id is above `since` was opened
  // after the caller read `since` (after its failed read), so it sees what
  // the writer did before that read.
  MutexLock lock(&latest_mu_);
  if (latest_ && latest_->id > since) return latest_;
  auto view = std::make_shared<LatestView>();
  TRAINSNAP_RETURN_IF_ERROR(OpenRocks(path_, StoreOptions(), /*read_only=*/true, env_, &view->handles));
  if (view->handles.handles.size() <= static_cast<size_t>(ColumnFamily::kChunks)) {
    return Status::Corruption("open store " + path_ + " read-only: column families missing");
  }
  view->id = ++latest_opens_;
  latest_ = view;
  return view;
}

Result<std::optional<PackEntry>> RocksStore::CurrentEntry(const ChunkHash& hash, const PackEntry& failed) {
  if (!read_only_) return LookupEntry(hash, rocksdb::ReadOptions());
  auto lookup = [&](const LatestView& view) -> Result<std::optional<PackEntry>> {
    rocksdb::PinnableSlice value;
    rocksdb::Status s =
        view.handles.db->Get(rocksdb::ReadOptions(), view.cf(ColumnFamily::kChunks), EncodeChunkKey(hash), &value);
    if (s.IsNotFound()) return std::optional<PackEntry>();
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "chunk " + hash.Hex() + ": read its index entry"));
    TRAINSNAP_ASSIGN_OR_RETURN(PackEntry entry, ParsePackEntry(std::string_view(value.data(), value.size())));
    return std::optional<PackEntry>(entry);
  };
  std::shared_ptr<LatestView> view;
  uint64_t since = 0;
  {
    MutexLock lock(&latest_mu_);
    if (confirmed_damaged_.count(failed.pack) > 0) return std::optional<PackEntry>(failed);
    view = latest_;
    since = latest_opens_;
  }
  // A view opened before this failure may already know the new place (or
  // that the chunk is gone); one that names the failed place may be older
  // than the change, so a newer one decides.
  if (view) {
    TRAINSNAP_ASSIGN_OR_RETURN(std::optional<PackEntry> entry, lookup(*view));
    if (!entry || !(*entry == failed)) return entry;
  }
  TRAINSNAP_ASSIGN_OR_RETURN(view, NewerView(since));
  TRAINSNAP_ASSIGN_OR_RETURN(std::optional<PackEntry> entry, lookup(*view));
  if (entry && *entry == failed) {
    MutexLock lock(&latest_mu_);
    confirmed_damaged_.insert(failed.pack);
  }
  return entry;
}

Result<bool> RocksStore::StoredNow(int64_t step) {
  rocksdb::DB* db = db_;
  rocksdb::ColumnFamilyHandle* snapshots = snapshots_cf_;
  std::shared_ptr<LatestView> view;
  if (read_only_) {
    uint64_t since = 0;
    {
      MutexLock lock(&latest_mu_);
      since = latest_opens_;
    }
    TRAINSNAP_ASSIGN_OR_RETURN(view, NewerView(since));
    db = view->handles.db;
    snapshots = view->cf(ColumnFamily::kSnapshots);
  }
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), snapshots, EncodeStepKey(step), &value);
  if (s.IsNotFound()) return false;
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "read snapshot record of " + StepName(step)));
  return true;
}

}  // namespace trainsnap::internal
