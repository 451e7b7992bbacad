#include "store/snapshot_writer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <vector>

#include <xxhash.h>

#include "store/chunk_codec.h"
#include "store/chunk_hash.h"
#include "store/keys.h"
#include "store/kill_point.h"
#include "store/parallel_for.h"
#include "store/records.h"
#include "store/thread_scratch.h"

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

// 16-bit floats get the sign-rotating two-plane split (see
// ChunkFilter::kFloat16Split; measured in bench/codec_bench).
bool UseFloat16Split(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// Record groups (WriteRecordGroups): a group ends after a record whose key
// hashes to 0 under this mask (64 records on average, about 3.5 KB for one
// chunk each), or at kMaxGroupRecords.
constexpr uint64_t kGroupEndMask = 63;
// Snapshots of fewer tensors keep one record per tensor in the tensors CF
// (format version 1): a single group would be rewritten whenever any of
// them changes, and the store stays readable by builds before groups.
constexpr size_t kMinGroupedRecords = 256;

// Bytes a delta chunk costs beyond its Zstd frame that the plain encoding
// does not: the base hash in the payload and the chunk_deps entry (16-byte
// key, 16-byte value). The estimate charges them to the delta, so that a
// small chunk takes a delta only when it is smaller all told.
constexpr size_t kDeltaFixedBytes = 3 * sizeof(ChunkHash);
// Chunks (tensors) smaller than this never get a delta. Measured with
// bench/codec_bench BM_SmallDelta (bench/README.md, "Deltas of small
// tensors"): with the 48 fixed bytes, a delta pays from 128 bytes on for
// bf16 weights under a small update (90 vs 144 stored bytes) and from 256
// bytes for fp32 (211 vs 272; 146 vs 144 at 128); at 64 bytes it never
// does.
constexpr size_t kMinDeltaBytes = 128;

std::string TensorName(uint64_t param_id, std::string_view role) {
  return "tensor param_id " + ParamIdHex(param_id) + " role " + std::string(role);
}

// A record to put in key order, (param_id, role), by comparing integers
// held in the array being sorted: the role's first 8 bytes, big-endian and
// zero-padded, order like the role itself, and only equal prefixes need the
// whole role from the record's map node (a cache miss at 150,000 records).
uint64_t RolePrefix(const std::string& role) {
  uint64_t prefix = 0;
  for (size_t i = 0; i < 8; ++i) {
    prefix = prefix << 8 | (i < role.size() ? static_cast<uint8_t>(role[i]) : 0);
  }
  return prefix;
}

struct SortedRecord {
  uint64_t param_id;
  uint64_t role_prefix;
  const RecordKey* key;
  const TensorRecord* record;
  bool operator<(const SortedRecord& o) const {
    if (param_id != o.param_id) return param_id < o.param_id;
    if (role_prefix != o.role_prefix) return role_prefix < o.role_prefix;
    return key->second < o.key->second;
  }
};

}  // namespace

SnapshotWriterImpl::SnapshotWriterImpl(ChunkSink* store, int64_t step, SnapshotOptions options)
    : store_(store), step_(step), options_(options), pack_floor_(store->AcquireWriterFloor()) {}

SnapshotWriterImpl::~SnapshotWriterImpl() {
  std::vector<ChunkHash> pinned;
  pinned.reserve(seen_.size());
  for (const auto& [hash, seen] : seen_) pinned.push_back(hash);
  store_->registry().Unpin(pinned);
  store_->registry().ReleaseInFlight(in_flight_held_);
  store_->ReleaseWriterFloor(pack_floor_);
}

void SnapshotWriterImpl::SetManifest(std::string bytes) {
  MutexLock lock(&mu_);
  manifest_ = std::move(bytes);
}

void SnapshotWriterImpl::SetSharedManifest(std::string bytes) {
  MutexLock lock(&mu_);
  shared_manifest_ = std::move(bytes);
}

Result<bool> SnapshotWriterImpl::PinExisting(const ChunkHash& hash) {
  bool first_use = false;
  {
    MutexLock lock(&mu_);
    auto [it, inserted] = seen_.try_emplace(hash);
    if (!inserted && it->second.stored_bytes != 0) return true;
    first_use = inserted;
  }
  std::optional<uint64_t> stored = first_use ? store_->registry().PinAndLookup(hash) : std::optional<uint64_t>();
  if (!stored) {
    TRAINSNAP_ASSIGN_OR_RETURN(stored, store_->LookupChunk(hash));
  }
  if (!stored) return false;
  MutexLock lock(&mu_);
  uint64_t& known = seen_[hash].stored_bytes;
  if (known == 0) known = *stored;
  return true;
}

Status SnapshotWriterImpl::AddChunk(const uint8_t* data, size_t size, DType dtype, const DeltaBase* bases,
                                    size_t index, ChunkRef* ref, uint8_t* depth, bool* delta, bool metadata) {
  ref->hash = HashChunk(data, size);
  ref->raw_bytes = size;
  *delta = false;
  const bool has_base = bases && index < bases->hashes.size();
  const bool same_as_base = has_base && bases->hashes[index] == ref->hash;
  // A deduplicated chunk keeps the depth it was written with, which this
  // process knows only when it is the base chunk.
  *depth = same_as_base ? bases->depths[index] : kUnknownDeltaDepth;
  bool first_use = false;
  {
    MutexLock lock(&mu_);
    auto [it, inserted] = seen_.try_emplace(ref->hash);
    if (!inserted && it->second.stored_bytes != 0) {
      ref->stored_bytes = it->second.stored_bytes;
      return Status::OK();
    }
    first_use = inserted;
  }
  // Pin before looking the chunk up, so that a concurrent GC cannot delete
  // the chunk between our existence check and our commit.
  std::optional<uint64_t> stored =
      first_use ? store_->registry().PinAndLookup(ref->hash) : std::optional<uint64_t>();
  // The chunk's pack place when this commit must index it (new, or another
  // live writer's in-flight chunk), and whether this writer appended it.
  std::optional<NewChunk> to_index;
  bool appended = false;
  if (!stored) {
    // Another live writer's chunk: the same encoding is indexed by whichever
    // commit comes first (see ChunkRegistry), so this one indexes it too.
    if (std::optional<InFlightChunk> flight = store_->registry().AcquireInFlight(ref->hash)) {
      TRAINSNAP_RETURN_IF_ERROR(AdoptInFlight(*flight));
      stored = flight->chunk.entry.length;
      *depth = flight->depth;
      to_index = flight->chunk;
    }
  }
  if (!stored) {
    TRAINSNAP_ASSIGN_OR_RETURN(stored, store_->LookupChunk(ref->hash));
  }
  if (!stored) {
    ChunkEncodeOptions encode;
    encode.compress = store_->sink_settings().compress;
    encode.zstd_level = store_->sink_settings().zstd_level;
    encode.element_size = ShuffleWidth(dtype);
    encode.float16_split = UseFloat16Split(dtype);
    // Reused per thread: a fresh 1 MiB string per chunk was zero-filled in
    // freshly faulted pages (a quarter of a dense capture's encode CPU,
    // bench/README.md "Plane coding").
    thread_local std::string encoded;
    ScratchTrim encoded_trim(encoded);
    *depth = 0;
    const ChunkHash* base_hash = nullptr;
    // Delta against the base chunk at the same index, while the store's
    // policy allows one and the estimate (byte histograms of a sample, see
    // EstimateEncodedSize) says it pays. The estimate decides alone:
    // compressing the chunk both ways would double the encoder's CPU for a
    // few percent of bytes.
    const bool may_delta = encode.compress && has_base && !bases->raw.empty() && bases->dtype == dtype &&
                           size >= kMinDeltaBytes && store_->MayDelta(*bases, index);
    if (may_delta) {
      const uint8_t* base = bases->raw[index]->data();
      const size_t plain_estimate = EstimateEncodedSize(data, nullptr, size, encode);
      const size_t delta_estimate = EstimateEncodedSize(data, base, size, encode);
      if (static_cast<double>(delta_estimate + kDeltaFixedBytes) <
          static_cast<double>(plain_estimate) * (1.0 - kMinDeltaSaving)) {
        TRAINSNAP_ASSIGN_OR_RETURN(bool base_present, PinExisting(bases->hashes[index]));
        if (base_present) {
          TRAINSNAP_RETURN_IF_ERROR(
              EncodeDeltaChunk(data, base, size, bases->hashes[index], bases->depths[index], encode, &encoded));
          // Where the delta does not beat raw storage after all, the plain
          // encoding below is used (and falls back to raw).
          if (encoded.size() < size) {
            *depth = static_cast<uint8_t>(bases->depths[index] + 1);
            *delta = true;
            base_hash = &bases->hashes[index];
          }
        }
      }
    }
    if (base_hash == nullptr) TRAINSNAP_RETURN_IF_ERROR(EncodeChunk(data, size, encode, &encoded));
    auto entry = store_->PutChunk(ref->hash, encoded);
    if (!entry.ok()) return entry.status();
    InFlightChunk mine;
    mine.chunk.hash = ref->hash;
    mine.chunk.entry = *entry;
    if (base_hash != nullptr) mine.chunk.base = *base_hash;
    mine.depth = *depth;
    // Another writer (or thread) may have appended the same bytes meanwhile:
    // the first registered copy is the one indexed, this one stays
    // unreferenced (compaction drops it).
    const InFlightChunk registered = store_->registry().RegisterInFlight(mine);
    TRAINSNAP_RETURN_IF_ERROR(AdoptInFlight(registered));
    appended = registered.chunk.entry == mine.chunk.entry;
    if (!appended) {
      *depth = registered.depth;
      *delta = false;  // not this writer's encoding against `bases`
    }
    to_index = registered.chunk;
    stored = registered.chunk.entry.length;
  }
  ref->stored_bytes = *stored;
  MutexLock lock(&mu_);
  SeenChunk& seen = seen_[ref->hash];
  if (seen.stored_bytes == 0) seen.stored_bytes = *stored;
  // Its index entry goes into this snapshot's commit (once, when two
  // threads of this writer met the same chunk).
  if (to_index && !seen.indexed) {
    seen.indexed = true;
    new_chunk_entries_.push_back(std::move(*to_index));
  }
  // Counted by the writer whose copy is indexed.
  if (appended) {
    if (metadata) {
      metadata_new_bytes_ += *stored;
    } else {
      ++new_chunks_;
      new_bytes_ += *stored;
    }
  }
  return Status::OK();
}

Status SnapshotWriterImpl::AdoptInFlight(const InFlightChunk& chunk) {
  {
    MutexLock lock(&mu_);
    in_flight_held_.push_back(chunk.chunk.hash);
  }
  if (!chunk.chunk.base) return Status::OK();
  // Every writer holding the chunk pins its base (the appender did when it
  // encoded it), so it stays pinned while the chunk is in flight; not
  // stored would be a defect, refused.
  TRAINSNAP_ASSIGN_OR_RETURN(bool present, PinExisting(*chunk.chunk.base));
  if (present) return Status::OK();
  return Status::Aborted("chunk " + chunk.chunk.hash.Hex() + ": the delta base " + chunk.chunk.base->Hex() +
                         " of its in-flight copy is no longer stored; capture again");
}

Status SnapshotWriterImpl::AddUnchangedTensor(uint64_t param_id, const std::string& role, int64_t from_step) {
  auto fail = [&](Status s) {
    return s.WithContext(TensorName(param_id, role) +
                         " unchanged since step " + std::to_string(from_step));
  };
  if (role.empty()) return fail(Status::InvalidArgument("empty role"));
  auto record = store_->CommittedTensor(from_step, param_id, role);
  if (!record.ok()) {
    MutexLock lock(&mu_);
    failed_ = true;
    if (first_error_.ok()) first_error_ = fail(record.status());
    return fail(record.status());
  }
  return AddRecord(std::move(*record), fail);
}

Status SnapshotWriterImpl::AddTensorRecord(const TensorRecord& record) {
  auto fail = [&](Status s) {
    return s.WithContext(TensorName(record.param_id, record.role) +
                         " (reused record)");
  };
  if (record.role.empty()) return fail(Status::InvalidArgument("empty role"));
  auto expected = CheckedTensorBytes(static_cast<uint32_t>(record.dtype), record.shape);
  if (!expected.ok()) return fail(expected.status());
  uint64_t total = 0;
  for (const ChunkRef& c : record.chunks) total += c.raw_bytes;
  if (*expected != record.bytes || total != record.bytes) {
    return fail(Status::InvalidArgument("record of " + std::to_string(record.bytes) + " bytes has chunks of " +
                                        std::to_string(total) + " bytes and a shape of " +
                                        std::to_string(*expected) + " bytes"));
  }
  return AddRecord(record, fail);
}

Status SnapshotWriterImpl::AddRecord(TensorRecord record, const std::function<Status(Status)>& fail) {
  const auto key = std::make_pair(record.param_id, record.role);
  {
    MutexLock lock(&mu_);
    if (committed_ || committing_) return fail(Status::InvalidArgument("the snapshot is already committed"));
    if (!records_.try_emplace(key).second) return fail(Status::InvalidArgument("added twice"));
    ++adding_;
  }
  auto unreserve = [&](Status s) {
    MutexLock lock(&mu_);
    --adding_;
    records_.erase(key);
    failed_ = true;
    if (first_error_.ok()) first_error_ = fail(s);
    return fail(s);
  };
  // Pin every chunk, then check it is still there: a GC that ran after the
  // record was read may have deleted the chunks of a deleted snapshot.
  for (size_t i = 0; i < record.chunks.size(); ++i) {
    auto present = PinExisting(record.chunks[i].hash);
    if (!present.ok()) return unreserve(present.status());
    if (!*present) {
      return unreserve(Status::NotFound("chunk " + std::to_string(i) + " " + record.chunks[i].hash.Hex() +
                                        " is no longer stored"));
    }
  }
  MutexLock lock(&mu_);
  --adding_;
  records_[key] = std::move(record);
  return Status::OK();
}

Status SnapshotWriterImpl::AddTensor(const TensorView& tensor) {
  // The name is built on failure only: a heap string per tensor otherwise.
  auto fail = [&](Status s) {
    return s.WithContext(tensor.name.empty() ? TensorName(tensor.param_id, tensor.role) : tensor.name);
  };
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
    MutexLock lock(&mu_);
    if (committed_ || committing_) return fail(Status::InvalidArgument("the snapshot is already committed"));
    if (!records_.try_emplace(key).second) return fail(Status::InvalidArgument("added twice"));
    ++adding_;
  }

  TensorRecord record;
  record.param_id = tensor.param_id;
  record.role = tensor.role;
  record.dtype = tensor.dtype;
  record.shape = tensor.shape;
  record.bytes = tensor.size_bytes;
  const size_t element_size = DTypeSize(tensor.dtype);
  const size_t chunk = std::max(element_size, store_->sink_settings().chunk_bytes / element_size * element_size);
  const size_t n = (tensor.size_bytes + chunk - 1) / chunk;
  record.chunks.resize(n);
  const auto* base = static_cast<const uint8_t*>(tensor.data);
  // The tensor's delta bases, when their layout matches.
  std::shared_ptr<const DeltaBase> bases;
  // Raw stores (StoreOptions::compress off) write no deltas: no bases to keep.
  const bool deltas = store_->DeltasEnabled();
  if (deltas) {
    bases = store_->DeltaBasesOf(key);
    if (bases && (bases->dtype != tensor.dtype || bases->bytes != tensor.size_bytes || bases->chunk != chunk)) {
      bases.reset();
    }
  }
  // The bases of the next version: this version's chunks, except that with
  // DeltaReference::kKeyframe a chunk written as a delta keeps its base.
  auto next = std::make_shared<DeltaBase>();
  next->dtype = tensor.dtype;
  next->bytes = tensor.size_bytes;
  next->chunk = chunk;
  next->hashes.resize(n);
  next->depths.resize(n, kUnknownDeltaDepth);
  next->ages.resize(n, 0);
  if (deltas && tensor.size_bytes <= store_->DeltaBaseBudget()) next->raw.resize(n);
  const bool keep_keyframes = store_->DeltaKeepsKeyframe();
  Status s = ParallelFor(store_->pool(), n, [&](size_t i) {
    const size_t offset = i * chunk;
    const size_t size = std::min(chunk, tensor.size_bytes - offset);
    bool delta = false;
    Status cs = AddChunk(base + offset, size, tensor.dtype, bases.get(), i, &record.chunks[i], &next->depths[i], &delta);
    next->hashes[i] = record.chunks[i].hash;
    const bool keyframe_stays = cs.ok() && delta && keep_keyframes;
    if (keyframe_stays) {
      next->hashes[i] = bases->hashes[i];
      next->depths[i] = bases->depths[i];
      next->ages[i] = static_cast<uint8_t>(bases->ages[i] + 1);
    }
    if (!next->raw.empty()) {
      const uint8_t* source = base + offset;
      next->raw[i] = keyframe_stays ? bases->raw[i] : std::make_shared<const std::vector<uint8_t>>(source, source + size);
    }
    return cs;
  });

  MutexLock lock(&mu_);
  --adding_;
  if (!s.ok()) {
    // The snapshot would lack this tensor: refuse to commit it.
    records_.erase(key);
    failed_ = true;
    if (first_error_.ok()) first_error_ = fail(s);
    return fail(s);
  }
  records_[key] = std::move(record);
  if (deltas) new_bases_.emplace_back(key, std::move(next));
  return Status::OK();
}

Result<std::vector<RecordGroupRef>> SnapshotWriterImpl::WriteRecordGroups(const std::vector<const TensorRecord*>& records) {
  // Cut points depend on each record's own key only (kGroupEndMask), so a
  // tensor added, removed or changed alters its own group and leaves the
  // others byte-identical: they deduplicate like unchanged tensor chunks.
  std::vector<std::pair<size_t, size_t>> cuts;  // [begin, end) into records
  size_t begin = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const TensorRecord& r = *records[i];
    const bool end = (XXH3_64bits_withSeed(r.role.data(), r.role.size(), r.param_id) & kGroupEndMask) == 0 ||
                     i + 1 - begin == kMaxGroupRecords || i + 1 == records.size();
    if (end) {
      cuts.emplace_back(begin, i + 1);
      begin = i + 1;
    }
  }
  std::vector<RecordGroupRef> groups(cuts.size());
  Status s = ParallelFor(store_->pool(), cuts.size(), [&](size_t g) {
    const std::vector<const TensorRecord*> members(records.begin() + static_cast<ptrdiff_t>(cuts[g].first),
                                                   records.begin() + static_cast<ptrdiff_t>(cuts[g].second));
    const std::string raw = SerializeRecordGroup(members);
    RecordGroupRef& ref = groups[g];
    ref.first_param_id = members.front()->param_id;
    ref.first_role = members.front()->role;
    ref.records = members.size();
    uint8_t depth = 0;
    bool delta = false;
    return AddChunk(reinterpret_cast<const uint8_t*>(raw.data()), raw.size(), DType::kUInt8, nullptr, 0, &ref.chunk,
                    &depth, &delta, /*metadata=*/true);
  });
  if (!s.ok()) return s.WithContext("write record groups");
  return groups;
}

Result<SnapshotInfo> SnapshotWriterImpl::Commit() {
  MutexLock lock(&mu_);
  const std::string context = "commit";
  if (committed_) return Status::InvalidArgument(context + ": already committed");
  if (committing_) return Status::InvalidArgument(context + ": another Commit is in progress");
  // The commit reads the records in place (not copies): one still being
  // added would change or vanish under it.
  if (adding_ > 0) return Status::InvalidArgument(context + ": an AddTensor is still running");
  if (failed_) return Status::Aborted(context + ": an AddTensor failed: " + first_error_.ToString());
  TRAINSNAP_KILL_POINT(kKillAfterChunks);
  SnapshotInfo info;
  info.step = step_;
  info.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  // In key order: into records_, which AddTensor leaves alone from here.
  std::vector<SortedRecord> sorted;
  sorted.reserve(records_.size());
  for (const auto& [key, record] : records_) {
    info.tensors += 1;
    info.logical_bytes += record.bytes;
    info.chunks += record.chunks.size();
    for (const ChunkRef& c : record.chunks) info.stored_bytes += c.stored_bytes;
    sorted.push_back({key.first, RolePrefix(key.second), &key, &record});
  }
  std::sort(sorted.begin(), sorted.end());
  std::vector<const TensorRecord*> records;
  records.reserve(sorted.size());
  for (const SortedRecord& r : sorted) records.push_back(r.record);
  std::optional<std::vector<RecordGroupRef>> groups;
  SharedManifestRef shared;
  if (shared_manifest_.size() > kMaxRecordGroupBytes) {
    return Status::InvalidArgument(context + ": shared manifest of " + std::to_string(shared_manifest_.size()) +
                                   " bytes, above " + std::to_string(kMaxRecordGroupBytes));
  }
  const bool shared_chunk = shared_manifest_.size() >= kMinSharedManifestChunkBytes;
  if (!shared_chunk) shared.inline_bytes = shared_manifest_;
  if (records.size() >= kMinGroupedRecords || shared_chunk) {
    // The groups and the shared manifest's chunk are written outside mu_
    // (AddChunk takes it); AddTensor is refused meanwhile, so `records`
    // stays the snapshot's full set.
    committing_ = true;
    // Written unlocked: a copy (SetSharedManifest may not race a Commit, but
    // mu_ guards the member).
    const std::string shared_bytes = shared_chunk ? shared_manifest_ : std::string();
    lock.Unlock();
    Status written = Status::OK();
    if (records.size() >= kMinGroupedRecords) {
      auto cut = WriteRecordGroups(records);
      if (cut.ok()) {
        groups = std::move(*cut);
      } else {
        written = cut.status();
      }
    }
    if (written.ok() && shared_chunk) {
      // One chunk, however large (bounded above): the layout changes rarely,
      // and then as a whole. Pinned like a record group until the writer dies.
      ChunkRef ref;
      uint8_t depth = 0;
      bool delta = false;
      written = AddChunk(reinterpret_cast<const uint8_t*>(shared_bytes.data()), shared_bytes.size(),
                         DType::kUInt8, nullptr, 0, &ref, &depth, &delta, /*metadata=*/true)
                    .WithContext("write shared manifest");
      shared.chunk = ref;
    }
    lock.Lock();
    committing_ = false;
    if (!written.ok()) return written.WithContext(context);
  }
  info.new_chunks = new_chunks_;
  info.new_bytes = new_bytes_;
  SnapshotCommit commit;
  commit.info = info;
  commit.records = std::move(records);
  commit.groups = std::move(groups);
  commit.manifest = manifest_;
  commit.shared = std::move(shared);
  commit.replace_existing = options_.replace_existing;
  commit.chunks = new_chunk_entries_;
  commit.delta_bases = &new_bases_;
  uint64_t record_bytes = 0;
  auto committed = store_->CommitSnapshot(std::move(commit), &record_bytes);
  if (!committed.ok()) return committed.status().WithContext(context);
  committed_ = true;
  metadata_bytes_ = record_bytes + metadata_new_bytes_;
  return committed;
}

}  // namespace trainsnap::internal
