#include "store/chunk_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <unordered_set>

#include "store/chunk_codec.h"
#include "store/chunk_hash.h"
#include "store/disk_space.h"
#include "store/keys.h"
#include "store/kill_point.h"
#include "store/messages.h"
#include "store/parallel_for.h"
#include "store/rocksdb_status.h"
#include "store/schema.h"
#include "store/thread_scratch.h"

namespace trainsnap::internal {
namespace {

// Tries of a newer read-only instance's open (CurrentEntry).
constexpr int kNewerOpenAttempts = 3;
// How many times a chunk read follows the chunk to where the index names it
// now (ReadChunkAt, ReadChunkValueAt): a compaction may move it again
// between a lookup and the read.
constexpr int kChunkMovesFollowed = 4;

// A failed read, with why looking the chunk up again did not help (when a
// newer instance could not be opened or read).
Status WithLookupFailure(const Status& read, const Status& lookup) {
  if (lookup.ok()) return read;
  return Status(read.code(),
                read.message() + " (looking it up again in a newer instance failed: " + lookup.ToString() + ")");
}

// Which chunks the index places in each pack.
struct PackUsage {
  uint64_t live = 0;  // encoded bytes of the index entries in the pack
  uint64_t end = 0;   // end of the last of them
  std::vector<std::pair<ChunkHash, PackEntry>> entries;
};

}  // namespace

Result<std::optional<PackEntry>> ChunkStore::LookupEntry(const ChunkHash& hash, const rocksdb::ReadOptions& ro) {
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db()->Get(ro, chunks_cf(), EncodeChunkKey(hash), &value);
  if (s.IsNotFound()) return std::optional<PackEntry>();
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "chunk " + hash.Hex() + ": read its index entry"));
  auto entry = ParsePackEntry(std::string_view(value.data(), value.size()));
  if (!entry.ok()) return entry.status().WithContext("chunk " + hash.Hex());
  return std::optional<PackEntry>(*entry);
}

Result<std::optional<uint64_t>> ChunkStore::LookupChunk(const ChunkHash& hash) {
  // Indexed, but its bytes are lost: as good as absent, so that the writer
  // stores the bytes again (its commit indexes the new copy).
  if (registry_.Unusable(hash)) return std::optional<uint64_t>();
  std::shared_lock<std::shared_mutex> view_lock;
  TRAINSNAP_RETURN_IF_ERROR(session_.AcquireView(&view_lock));
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db()->Get(rocksdb::ReadOptions(), chunks_cf(), EncodeChunkKey(hash), &value);
  if (s.IsNotFound()) return std::optional<uint64_t>();
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "look up chunk " + hash.Hex()));
  auto entry = ParsePackEntry(std::string_view(value.data(), value.size()));
  if (!entry.ok()) return entry.status().WithContext("look up chunk " + hash.Hex());
  registry_.NoteStored(hash, entry->length);
  return std::optional<uint64_t>(entry->length);
}

Result<PackEntry> ChunkStore::PutChunk(const ChunkHash& hash, const std::string& encoded) {
  const std::string context = "write chunk " + hash.Hex();
  if (session_.read_only()) return Status::NotSupported(context + ": store " + session_.path() + " is open read-only");
  auto header = ParseChunkHeader(encoded);
  if (!header.ok()) return header.status().WithContext(context);
  const bool raw = header->codec == ChunkCodec::kRaw && header->filter == ChunkFilter::kNone;
  auto entry = packs_->Append(encoded, header->raw_bytes, raw);
  if (!entry.ok()) return entry.status().WithContext(context);
  return *entry;
}

uint32_t ChunkStore::AcquireWriterFloor() {
  MutexLock lock(&floors_mu_);
  const uint32_t floor = packs_->NextAppendPack();
  writer_floors_.insert(floor);
  return floor;
}

void ChunkStore::ReleaseWriterFloor(uint32_t floor) {
  MutexLock lock(&floors_mu_);
  auto it = writer_floors_.find(floor);
  if (it != writer_floors_.end()) writer_floors_.erase(it);
}

Status ChunkStore::IndexForCommit(const std::vector<NewChunk>& chunks, const std::string& context,
                                  rocksdb::WriteBatch* batch) {
  if (chunks.empty()) return Status::OK();
  // The chunks' bytes become durable before the batch that references them.
  TRAINSNAP_RETURN_IF_ERROR(packs_->Sync().WithContext(context + ": sync pack files"));
  for (const NewChunk& c : chunks) {
    if (!packs_->IsDurable(c.entry)) {
      return Status::Aborted(context + ": chunk " + c.hash.Hex() + " is in " + PackFileName(c.entry.pack) +
                             ", which a failed write or sync retired before it was durable; capture again");
    }
  }
  for (const NewChunk& c : chunks) {
    const std::string key = EncodeChunkKey(c.hash);
    if (c.base) {
      if (chunk_deps_cf() == nullptr) return Status::Aborted(context + ": no chunk_deps CF");
      TRAINSNAP_RETURN_IF_ERROR(
          FromRocks(batch->Put(chunk_deps_cf(), key, EncodeChunkKey(*c.base)), "write chunk dependency"));
    } else if (chunk_deps_cf() != nullptr && registry_.Unusable(c.hash)) {
      // A lost delta chunk written again whole: it no longer needs its base.
      TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch->Delete(chunk_deps_cf(), key), "delete chunk dependency"));
    }
    TRAINSNAP_RETURN_IF_ERROR(
        FromRocks(batch->Put(chunks_cf(), key, EncodePackEntry(c.entry)), "write chunk index entry"));
  }
  return Status::OK();
}

void ChunkStore::NoteIndexed(const std::vector<NewChunk>& chunks) {
  for (const NewChunk& c : chunks) registry_.NoteIndexed(c.hash, c.entry.length);
  packs_->RotateIfAtLeast(kPackRotateAtCommitBytes);
}

Status ChunkStore::ReadChunkDeps(std::unordered_map<ChunkHash, ChunkHash, ChunkHashHasher>* deps) {
  if (chunk_deps_cf() == nullptr) return Status::OK();
  std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(rocksdb::ReadOptions(), chunk_deps_cf()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto hash = DecodeChunkKey(std::string_view(it->key().data(), it->key().size()));
    auto base = DecodeChunkKey(std::string_view(it->value().data(), it->value().size()));
    // A damaged entry might hide a needed base: refuse to collect.
    if (!hash.ok()) return hash.status().WithContext("chunk_deps key");
    if (!base.ok()) return base.status().WithContext("chunk_deps of " + hash->Hex());
    deps->emplace(*hash, *base);
  }
  return FromRocks(it->status(), "scan chunk_deps");
}

Status ChunkStore::AddDeltaBases(std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher>* live) {
  std::unordered_map<ChunkHash, ChunkHash, ChunkHashHasher> deps;
  TRAINSNAP_RETURN_IF_ERROR(ReadChunkDeps(&deps));
  if (deps.empty()) return Status::OK();
  std::vector<ChunkHash> todo;
  for (const auto& [hash, size] : *live) todo.push_back(hash);
  while (!todo.empty()) {
    const ChunkHash h = todo.back();
    todo.pop_back();
    auto d = deps.find(h);
    if (d == deps.end()) continue;
    if (live->emplace(d->second, 0).second) todo.push_back(d->second);
  }
  return Status::OK();
}

Result<GcReport> ChunkStore::EraseChunks(std::vector<ChunkHash> candidates, const std::vector<uint64_t>& sizes,
                                         GcReport report) {
  std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher> size_of;
  for (size_t i = 0; i < candidates.size(); ++i) size_of[candidates[i]] = sizes[i];
  for (size_t begin = 0; begin < candidates.size(); begin += kGcBatch) {
    std::vector<ChunkHash> batch_hashes(candidates.begin() + begin,
                                        candidates.begin() + std::min(candidates.size(), begin + kGcBatch));
    Status s = registry_.EraseUnpinned(&batch_hashes, [&](const std::vector<ChunkHash>& hashes) {
      rocksdb::WriteBatch batch;
      for (const ChunkHash& h : hashes) {
        TRAINSNAP_RETURN_IF_ERROR(FromRocks(batch.Delete(chunks_cf(), EncodeChunkKey(h)), "delete chunk"));
        if (chunk_deps_cf() != nullptr) {
          TRAINSNAP_RETURN_IF_ERROR(
              FromRocks(batch.Delete(chunk_deps_cf(), EncodeChunkKey(h)), "delete chunk dependency"));
        }
      }
      return session_.CheckWrite(db()->Write(rocksdb::WriteOptions(), &batch), "delete chunks");
    });
    TRAINSNAP_RETURN_IF_ERROR(s);
    TRAINSNAP_KILL_POINT(kKillGcMidway);
    for (const ChunkHash& h : batch_hashes) {
      report.chunks_deleted += 1;
      report.bytes_deleted += size_of[h];
    }
  }
  report.chunks_live = report.chunks_scanned - report.chunks_deleted;
  return report;
}

Status ChunkStore::ChunkGone(const ChunkHash& hash) {
  return Status::NotFound("chunk " + hash.Hex() +
                          ": no longer stored: a writer deleted it, with the snapshots that referenced it, since "
                          "this store read them (Refresh() a read-only store to see it as it is now)");
}

Status ChunkStore::ReadChunkValue(const ChunkHash& hash, const rocksdb::ReadOptions& ro, std::string* out) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::optional<PackEntry> entry, LookupEntry(hash, ro));
  if (!entry) return Status::Corruption("chunk " + hash.Hex() + ": referenced but missing from the store");
  return ReadChunkValueAt(hash, *entry, out);
}

Status ChunkStore::ReadChunkValueAt(const ChunkHash& hash, PackEntry entry, std::string* out) {
  Status s = packs_->ReadEncoded(entry, out);
  // A compaction may have moved the chunk since the entry was read, or a
  // collection deleted it: read it where the index names it now (the same
  // bytes: the hash names them). A reader slower than the writer's
  // compactions may find it moved again by then: each move is followed, up
  // to kChunkMovesFollowed.
  for (int moves = 0; !s.ok() && moves < kChunkMovesFollowed; ++moves) {
    auto now = CurrentEntry(hash, entry);
    if (now.ok() && !now->has_value()) return ChunkGone(hash);
    if (!now.ok() || **now == entry) {
      NoteFailedRead(hash, entry, ReadFailure::kPack);
      return WithLookupFailure(s, now.status()).WithContext("chunk " + hash.Hex());
    }
    entry = **now;
    s = packs_->ReadEncoded(entry, out);
  }
  return s.WithContext("chunk " + hash.Hex());
}

Status ChunkStore::ReadAndCheck(const ChunkRef& ref, const PackEntry& entry, uint8_t* dst, ReadFailure* failure) {
  *failure = ReadFailure::kPack;
  thread_local std::string buffer;
  ScratchTrim trim(buffer);
  Status read = entry.raw ? packs_->ReadRawInto(entry, dst) : packs_->ReadEncoded(entry, &buffer);
  if (!read.ok()) return read.WithContext("chunk " + ref.hash.Hex());
  *failure = ReadFailure::kContent;
  if (!entry.raw) return ReadChunkInto(ref, buffer, dst);
  if (!(HashChunk(dst, ref.raw_bytes) == ref.hash)) {
    return Status::Corruption("chunk " + ref.hash.Hex() + ": hash mismatch");
  }
  return Status::OK();
}

Status ChunkStore::ReadChunkAt(const ChunkRef& ref, PackEntry entry, uint8_t* dst) {
  if (entry.raw_bytes != ref.raw_bytes) {
    return Status::Corruption("chunk " + ref.hash.Hex() + ": the index records " + std::to_string(entry.raw_bytes) +
                              " raw bytes, the tensor record " + std::to_string(ref.raw_bytes));
  }
  ReadFailure failure;
  Status s = ReadAndCheck(ref, entry, dst, &failure);
  // See ReadChunkValueAt: again where the index names the chunk now. A
  // read-only store's view may also name a place the writer has since
  // reused (its bytes then fail the hash): that is looked up again too.
  for (int moves = 0; !s.ok() && moves < kChunkMovesFollowed; ++moves) {
    auto now = CurrentEntry(ref.hash, entry);
    if (now.ok() && !now->has_value()) return ChunkGone(ref.hash);
    if (!now.ok() || **now == entry || (*now)->raw_bytes != ref.raw_bytes) {
      NoteFailedRead(ref.hash, entry, failure);
      return WithLookupFailure(s, now.status());
    }
    entry = **now;
    s = ReadAndCheck(ref, entry, dst, &failure);
  }
  if (!s.ok()) NoteFailedRead(ref.hash, entry, failure);
  return s;
}

Status ChunkStore::ReadChunkInto(const ChunkRef& ref, std::string_view value, uint8_t* dst, int depth_budget,
                                 bool check_hash) {
  auto header = ParseChunkHeader(value);
  if (!header.ok()) return header.status().WithContext("chunk " + ref.hash.Hex());
  const bool delta = header->filter == ChunkFilter::kXorDelta;
  // The base's stored bytes, in a per-thread buffer per chain level (a
  // deeper level reads its own base while this one's is still in use),
  // sized once: a fresh string per delta chunk was an allocation and a
  // zero-fill of the chunk's size before every base read.
  thread_local std::vector<std::string> base_buffers(static_cast<size_t>(kMaxDeltaDepth) + 1);
  const int level = kMaxDeltaDepth - std::clamp(depth_budget, 0, int{kMaxDeltaDepth});
  std::string& base_value = base_buffers[static_cast<size_t>(level)];
  ScratchTrim base_trim(base_value);
  ChunkRef base_ref;
  std::string where;
  if (delta) {
    // The base is read like any chunk (its bytes are what the hash names,
    // whichever encoding the index holds), straight into dst: the delta is
    // then XORed onto it in place, so a delta costs one more decode and no
    // buffer. The budget ends the recursion.
    where = "delta chunk " + ref.hash.Hex() + " (depth " + std::to_string(header->delta_depth) + "): base " +
            header->base.Hex();
    auto base_entry = LookupEntry(header->base, ChunkReadOptions());
    if (!base_entry.ok()) return base_entry.status().WithContext(where);
    if (!base_entry->has_value()) return Status::Corruption(where + ": missing from the store");
    Status read = ReadChunkValueAt(header->base, **base_entry, &base_value);
    if (!read.ok()) return read.WithContext(where);
    auto base_header = ParseChunkHeader(base_value);
    if (!base_header.ok()) return base_header.status().WithContext(where);
    if (depth_budget <= 0) {
      return Status::Corruption(where + ": delta chain longer than " + std::to_string(kMaxDeltaDepth) +
                                " links (a cycle)");
    }
    base_ref.hash = header->base;
    base_ref.raw_bytes = ref.raw_bytes;
    TRAINSNAP_RETURN_IF_ERROR(
        ReadChunkInto(base_ref, base_value, dst, depth_budget - 1, /*check_hash=*/false).WithContext(where));
  }
  Status s = DecodeChunk(value, dst, ref.raw_bytes, delta ? dst : nullptr);
  if (!s.ok()) return s.WithContext("chunk " + ref.hash.Hex());
  if (!check_hash || HashChunk(dst, ref.raw_bytes) == ref.hash) return Status::OK();
  if (delta) {
    // Which one is damaged: the base, checked on its own, or the delta.
    std::unique_ptr<uint8_t[]> base(new uint8_t[ref.raw_bytes]);
    TRAINSNAP_RETURN_IF_ERROR(ReadChunkInto(base_ref, base_value, base.get(), depth_budget - 1).WithContext(where));
  }
  return Status::Corruption("chunk " + ref.hash.Hex() + ": hash mismatch");
}

Status ChunkStore::ReadTensors(const std::vector<TensorRead>& reads) {
  if (pool_ == nullptr) return Status::NotSupported("read tensors: a store probe reads no tensors");
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
    if (total != record.bytes)
      return Status::InvalidArgument(ReadName(r) + ": chunk lengths do not add up to its bytes");
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

void ChunkStore::ReadChunkBatch(const std::vector<ChunkRead>& chunks, size_t begin, size_t end,
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
  db()->MultiGet(ChunkReadOptions(), chunks_cf(), n, key_slices.data(), values.data(), statuses.data());
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

Result<std::optional<PackEntry>> ChunkStore::CurrentEntry(const ChunkHash& hash, const PackEntry& failed) {
  if (!session_.read_only()) return LookupEntry(hash, rocksdb::ReadOptions());
  auto lookup = [&](const DbSession::Newer& newer) -> Result<std::optional<PackEntry>> {
    rocksdb::PinnableSlice value;
    rocksdb::Status s = newer.handles.db->Get(rocksdb::ReadOptions(), newer.handles.cf(ColumnFamily::kChunks),
                                              EncodeChunkKey(hash), &value);
    if (s.IsNotFound()) return std::optional<PackEntry>();
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "chunk " + hash.Hex() + ": read its index entry"));
    TRAINSNAP_ASSIGN_OR_RETURN(PackEntry entry, ParsePackEntry(std::string_view(value.data(), value.size())));
    return std::optional<PackEntry>(entry);
  };
  {
    MutexLock lock(&confirmed_mu_);
    if (confirmed_damaged_.count(failed.pack) > 0) return std::optional<PackEntry>(failed);
  }
  const uint64_t since = session_.newer_opened();
  // An instance opened before this failure may already know the new place
  // (or that the chunk is gone); one that names the failed place may be
  // older than the change, so a newer one decides.
  if (std::shared_ptr<const DbSession::Newer> newest = session_.newest()) {
    TRAINSNAP_ASSIGN_OR_RETURN(std::optional<PackEntry> entry, lookup(*newest));
    if (!entry || !(*entry == failed)) return entry;
  }
  // A read-only open races the writer's memtable flushes: it can fail (a
  // WAL file it listed was removed meanwhile), and it may miss the flushed
  // writes (if it read the MANIFEST before the flush's edit and listed the
  // WAL files after). So a failed open is tried again, and a second
  // instance, opened after the first, confirms before the pack counts as
  // damaged.
  auto open_newer = [&](uint64_t after) -> Result<std::shared_ptr<const DbSession::Newer>> {
    Result<std::shared_ptr<const DbSession::Newer>> newer = session_.NewerThan(after);
    for (int attempt = 1; !newer.ok() && attempt < kNewerOpenAttempts; ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10 * attempt));
      newer = session_.NewerThan(after);
    }
    return newer;
  };
  TRAINSNAP_ASSIGN_OR_RETURN(std::shared_ptr<const DbSession::Newer> newer, open_newer(since));
  TRAINSNAP_ASSIGN_OR_RETURN(std::optional<PackEntry> entry, lookup(*newer));
  if (entry && *entry == failed) {
    TRAINSNAP_ASSIGN_OR_RETURN(newer, open_newer(newer->id));
    TRAINSNAP_ASSIGN_OR_RETURN(entry, lookup(*newer));
  }
  if (entry && *entry == failed) {
    MutexLock lock(&confirmed_mu_);
    confirmed_damaged_.insert(failed.pack);
  }
  return entry;
}

void ChunkStore::OnSwap() {
  // Dedup answers must come from the new instance; a pack brought back from
  // a copy is looked at again.
  registry_.ForgetSizes();
  MutexLock lock(&confirmed_mu_);
  confirmed_damaged_.clear();
}

Result<std::string> ChunkStore::ReadMetadataChunk(const ChunkRef& chunk, const std::string& where,
                                                  const rocksdb::ReadOptions& ro) {
  std::string value;
  TRAINSNAP_RETURN_IF_ERROR(ReadChunkValue(chunk.hash, ro, &value).WithContext(where));
  std::string raw(chunk.raw_bytes, '\0');
  TRAINSNAP_RETURN_IF_ERROR(ReadChunkInto(chunk, value, reinterpret_cast<uint8_t*>(raw.data())).WithContext(where));
  return raw;
}

Status ChunkStore::NoteDamage(const std::vector<PackDamage>& damage) {
  if (session_.read_only() || damage.empty()) return Status::OK();
  std::vector<PackDamage> fresh;
  {
    MutexLock lock(&damage_mu_);
    for (const PackDamage& d : damage) {
      auto known = damaged_packs_.find(d.pack);
      if (known != damaged_packs_.end() && known->second.size == d.size) continue;
      damaged_packs_[d.pack] = d;
      fresh.push_back(d);
    }
  }
  if (fresh.empty()) return Status::OK();
  // Appends to a pack whose file is gone would never reach a file.
  const std::optional<uint32_t> active = packs_->active_pack();
  for (const PackDamage& d : fresh) {
    if (active == d.pack) packs_->Rotate();
  }
  std::vector<ChunkHash> lost;
  std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(rocksdb::ReadOptions(), chunks_cf()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto entry = ParsePackEntry(std::string_view(it->value().data(), it->value().size()));
    if (!entry.ok()) continue;  // Verify reports it; it names no pack to trust
    for (const PackDamage& d : fresh) {
      if (!d.Covers(*entry)) continue;
      auto hash = DecodeChunkKey(std::string_view(it->key().data(), it->key().size()));
      if (hash.ok()) lost.push_back(*hash);
      break;
    }
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan the chunk index for damaged packs"));
  return MarkUnusableWithDeltas(std::move(lost));
}

Status ChunkStore::MarkUnusableWithDeltas(std::vector<ChunkHash> hashes) {
  if (session_.read_only() || hashes.empty()) return Status::OK();
  // A delta chunk decodes only with its base: deltas of a lost chunk are
  // lost too, however whole their own bytes are.
  std::unordered_map<ChunkHash, ChunkHash, ChunkHashHasher> deps;
  TRAINSNAP_RETURN_IF_ERROR(ReadChunkDeps(&deps));
  std::unordered_map<ChunkHash, std::vector<ChunkHash>, ChunkHashHasher> deltas_of;
  for (const auto& [delta, base] : deps) deltas_of[base].push_back(delta);
  std::unordered_set<ChunkHash, ChunkHashHasher> marked(hashes.begin(), hashes.end());
  std::vector<ChunkHash> todo = hashes;
  while (!todo.empty()) {
    const ChunkHash h = todo.back();
    todo.pop_back();
    auto found = deltas_of.find(h);
    if (found == deltas_of.end()) continue;
    for (const ChunkHash& delta : found->second) {
      if (marked.insert(delta).second) todo.push_back(delta);
    }
  }
  registry_.MarkUnusable(std::vector<ChunkHash>(marked.begin(), marked.end()));
  return Status::OK();
}

void ChunkStore::NoteFailedRead(const ChunkHash& hash, const PackEntry& entry, ReadFailure failure) {
  if (session_.read_only()) return;
  if (failure == ReadFailure::kContent) {
    static_cast<void>(MarkUnusableWithDeltas({hash}));
    return;
  }
  // A read error of the file (permission denied, EIO) is not damage by
  // itself; a pack that is missing or shorter than the chunk is.
  struct stat st;
  const std::string file = packs_->dir() + "/" + PackFileName(entry.pack);
  PackDamage damage{entry.pack, std::nullopt, entry.end()};
  if (::stat(file.c_str(), &st) == 0) {
    if (static_cast<uint64_t>(st.st_size) >= entry.end()) return;
    damage.size = static_cast<uint64_t>(st.st_size);
  } else if (errno != ENOENT) {
    return;
  }
  static_cast<void>(NoteDamage({damage}));
}

Status ChunkStore::Open(bool fsync) {
  fs_ = session_.env() != nullptr ? session_.env()->GetFileSystem() : rocksdb::FileSystem::Default();
  auto packs = PackSet::Open(fs_.get(), session_.path(), !session_.read_only(), kPackTargetBytes, fsync);
  if (!packs.ok()) return packs.status().WithContext("open the pack files");
  packs_ = std::move(*packs);
  if (session_.read_only()) return Status::OK();
  std::vector<PackDamage> damage;
  TRAINSNAP_RETURN_IF_ERROR(RecoverPacks(&damage).WithContext("recover the pack files"));
  // Writers must not deduplicate onto what a missing or cut pack lost.
  return NoteDamage(damage).WithContext("recover the pack files");
}

Status ChunkStore::RecoverBeforeOpen(const std::string& path, rocksdb::Env* env) {
  std::shared_ptr<rocksdb::FileSystem> fs = env != nullptr ? env->GetFileSystem() : rocksdb::FileSystem::Default();
  // The LOCK file RocksDB's writer holds: taken and released here, so a
  // writer that opens later finds the packs recovered, and none runs now.
  rocksdb::FileLock* lock = nullptr;
  TRAINSNAP_RETURN_IF_ERROR(
      FromRocks(fs->LockFile(path + "/LOCK", rocksdb::IOOptions(), &lock, nullptr), "lock the store", path));
  Status s;
  {
    DbSession session(path, /*read_only=*/true, env);
    s = session.Open(StoreOptions());
    if (s.ok()) {
      ChunkStore probe(session, /*pool=*/nullptr, /*threads=*/1);
      probe.fs_ = fs;
      auto packs = PackSet::Open(fs.get(), path, /*writable=*/true, kPackTargetBytes);
      if (packs.ok()) {
        probe.packs_ = std::move(*packs);
        s = probe.RecoverPacks(nullptr);
      } else {
        s = packs.status();
      }
    }
  }
  rocksdb::IOStatus unlocked = fs->UnlockFile(lock, rocksdb::IOOptions(), nullptr);
  TRAINSNAP_RETURN_IF_ERROR(s.WithContext("recover the pack files"));
  return FromRocks(unlocked, "unlock the store");
}

Status ChunkStore::RecoverPacks(std::vector<PackDamage>* damage) {
  std::map<uint32_t, uint64_t> ends;
  std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(rocksdb::ReadOptions(), chunks_cf()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto entry = ParsePackEntry(std::string_view(it->value().data(), it->value().size()));
    // A damaged entry might name bytes that a truncation would destroy.
    if (!entry.ok()) return Status::OK();
    uint64_t& end = ends[entry->pack];
    end = std::max(end, entry->end());
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "scan the chunk index"));
  if (!ends.empty()) packs_->ReserveNumbers(ends.rbegin()->first);
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<PackSet::FileInfo> files, packs_->List());
  if (damage != nullptr) *damage = FindPackDamage(ends, files);
  for (const PackSet::FileInfo& f : files) {
    auto used = ends.find(f.pack);
    if (used == ends.end()) {
      // No committed chunk in it: a capture's that never committed, or a
      // pack that compaction had emptied when the process stopped.
      TRAINSNAP_RETURN_IF_ERROR(packs_->Remove(f.pack));
    } else if (f.size > used->second) {
      // Bytes appended after the last committed chunk: never referenced.
      TRAINSNAP_RETURN_IF_ERROR(packs_->Truncate(f.pack, used->second));
    }
  }
  return Status::OK();
}

Status ChunkStore::CompactPacks(GcReport* report) {
  GcReport ignored;
  if (report == nullptr) report = &ignored;
  std::map<uint32_t, PackUsage> usage;
  {
    std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(rocksdb::ReadOptions(), chunks_cf()));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      TRAINSNAP_ASSIGN_OR_RETURN(ChunkHash hash, DecodeChunkKey(std::string_view(it->key().data(), it->key().size())));
      // A damaged entry might place a live chunk anywhere: move nothing.
      auto entry = ParsePackEntry(std::string_view(it->value().data(), it->value().size()));
      if (!entry.ok()) return entry.status().WithContext("compact packs: chunk " + hash.Hex() + ", refusing");
      PackUsage& u = usage[entry->pack];
      u.live += entry->length;
      u.end = std::max(u.end, entry->end());
      u.entries.emplace_back(hash, *entry);
    }
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(it->status(), "compact packs: scan the chunk index"));
  }
  uint64_t live_bytes = 0;
  std::map<uint32_t, uint64_t> ends;
  for (const auto& [pack, u] : usage) {
    live_bytes += u.live;
    ends[pack] = u.end;
  }
  live_pack_bytes_ = live_bytes;
  // Packs writers may still append to or commit from stay: every one from
  // the oldest floor of a live writer (or in-flight chunk) on. The active pack is ended here
  // (later captures append to a new one), so that once its writers are gone
  // the next compaction may take it; unsynced bytes in it are a live
  // writer's, whose floor keeps it.
  packs_->Rotate();
  // Closes the rotated pack (its bytes are a dead writer's or synced); a
  // failure only leaves it to the next compaction.
  static_cast<void>(packs_->Sync());
  uint32_t floor = packs_->NextAppendPack();
  {
    MutexLock lock(&floors_mu_);
    if (!writer_floors_.empty()) floor = std::min(floor, *writer_floors_.begin());
  }
  // A live writer may commit another's in-flight chunk from a pack below
  // its own floor (the appender may be gone): that pack stays too.
  if (std::optional<uint32_t> in_flight = registry_.OldestInFlightPack()) floor = std::min(floor, *in_flight);
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<PackSet::FileInfo> files, packs_->List());
  // A missing or cut pack is left as it is: its chunks cannot be copied,
  // and a pack file brought back from a copy makes them whole again.
  const std::vector<PackDamage> damage = FindPackDamage(ends, files);
  std::set<uint32_t> damaged;
  report->damaged_packs.clear();
  for (const PackDamage& d : damage) {
    damaged.insert(d.pack);
    report->damaged_packs.push_back(d.Describe());
  }
  TRAINSNAP_RETURN_IF_ERROR(NoteDamage(damage).WithContext("compact packs"));
  std::vector<PackSet::FileInfo> empty, tails, sparse;
  for (PackSet::FileInfo f : files) {
    if (f.pack >= floor || damaged.count(f.pack) > 0) continue;
    auto u = usage.find(f.pack);
    if (u == usage.end()) {
      empty.push_back(f);
      continue;
    }
    if (f.size > u->second.end && !packs_->IsOpen(f.pack)) {
      // A failed or abandoned capture's bytes after the last indexed chunk:
      // given back without copying anything (a full disk has no room for
      // copies). No live writer can commit them (the floor).
      tails.push_back(f);
      f.size = u->second.end;
    }
    const uint64_t chunk_bytes = f.size > kPackHeaderBytes ? f.size - kPackHeaderBytes : 0;
    if (static_cast<double>(u->second.live) < kCompactBelow * static_cast<double>(chunk_bytes)) {
      sparse.push_back(f);
    }
  }
  if (!empty.empty() || !tails.empty()) {
    // The deletions of index entries in these bytes must be durable before
    // the bytes go: a power loss must not bring back an entry pointing nowhere.
    TRAINSNAP_RETURN_IF_ERROR(session_.CheckWrite(db()->FlushWAL(/*sync=*/true), "compact packs: sync the WAL"));
    for (const PackSet::FileInfo& f : empty) {
      TRAINSNAP_RETURN_IF_ERROR(packs_->Remove(f.pack).WithContext("compact packs"));
      ++report->packs_removed;
      report->pack_bytes_freed += f.size;
    }
    for (const PackSet::FileInfo& f : tails) {
      const uint64_t end = usage.at(f.pack).end;
      TRAINSNAP_RETURN_IF_ERROR(packs_->Truncate(f.pack, end).WithContext("compact packs"));
      report->pack_bytes_freed += f.size - end;
    }
  }
  // Rewriting needs room for the copies: as many packs as the free space holds.
  const std::optional<uint64_t> free = FreeBytes(session_.path());
  uint64_t budget = free ? *free : 0;
  bool copied = false;
  for (const PackSet::FileInfo& f : sparse) {
    const PackUsage& u = usage.at(f.pack);
    if (u.live > budget) break;
    budget -= u.live;
    const std::string context = "compact " + PackFileName(f.pack);
    rocksdb::WriteBatch batch;
    std::string value;
    Status unreadable;
    for (const auto& [hash, entry] : u.entries) {
      unreadable = packs_->ReadEncoded(entry, &value);
      if (!unreadable.ok()) {
        NoteFailedRead(hash, entry, ReadFailure::kPack);
        unreadable = unreadable.WithContext("chunk " + hash.Hex());
        break;
      }
      auto moved = packs_->Append(value, entry.raw_bytes, entry.raw);
      if (!moved.ok()) return moved.status().WithContext(context);
      TRAINSNAP_RETURN_IF_ERROR(
          FromRocks(batch.Put(chunks_cf(), EncodeChunkKey(hash), EncodePackEntry(*moved)), context));
    }
    if (!unreadable.ok()) {
      // The pack stays as it is (the copies made so far are garbage for a
      // later compaction); the other packs are still compacted.
      report->damaged_packs.push_back(std::string(kPackDir) + "/" + PackFileName(f.pack) +
                                      " was not compacted: " + unreadable.ToString());
      continue;
    }
    copied = true;
    TRAINSNAP_KILL_POINT(kKillCompactCopied);
    TRAINSNAP_RETURN_IF_ERROR(packs_->Sync().WithContext(context));
    TRAINSNAP_KILL_POINT(kKillCompactSynced);
    rocksdb::WriteOptions wo;
    wo.sync = true;
    TRAINSNAP_RETURN_IF_ERROR(session_.CheckWrite(db()->Write(wo, &batch), context + ": move the index entries"));
    TRAINSNAP_KILL_POINT(kKillCompactIndexed);
    TRAINSNAP_RETURN_IF_ERROR(packs_->Remove(f.pack).WithContext(context));
    ++report->packs_removed;
    report->pack_bytes_rewritten += u.live;
    report->pack_bytes_freed += f.size - u.live;
  }
  // The copies (older chunks, still live) do not share a pack with the
  // chunks of later captures, whose snapshots retention drops at other times.
  if (copied) packs_->Rotate();
  return Status::OK();
}

}  // namespace trainsnap::internal
