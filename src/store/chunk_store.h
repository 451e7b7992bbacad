// ChunkStore: a store's chunks (docs/code-map.md, "The store's parts"): the
// chunk index (chunks CF) and delta dependencies (chunk_deps CF), the pack
// files that hold the bytes, the writers' registry (pins, known sizes,
// in-flight and unusable chunks), the delta bases of the next captures,
// pack recovery and compaction, damage found in packs, and reads of chunks
// (delta chains, a chunk looked up again where a compaction moved it). It
// knows no snapshot: the catalog does.
//
// Thread-safe. Every method that reads the database runs under a view of
// the session that the caller holds (DbSession::AcquireView). Maintenance
// (RecoverPacks, CompactPacks, EraseChunks) must be serialized by the caller
// (the store's commit lock). Lock order: the session's locks, then
// floors_mu_, damage_mu_, confirmed_mu_ and the registry's (all leaves).
#pragma once

#include <boost/asio/thread_pool.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/file_system.h>
#include <rocksdb/write_batch.h>

#include "common/mutex.h"
#include "store/chunk_codec.h"
#include "store/chunk_registry.h"
#include "store/db_session.h"
#include "store/delta_base_cache.h"
#include "store/pack_damage.h"
#include "store/pack_entry.h"
#include "store/pack_set.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

// Pack files are closed for appends (a new one is started) at this size.
inline constexpr uint64_t kPackTargetBytes = uint64_t{64} << 20;
// A commit ends the active pack once it holds this much: the chunks of a
// large snapshot get packs of their own, so that deleting the snapshot
// (retention drops the oldest) deletes whole packs instead of leaving
// packs part live, which compaction would rewrite (with keep_last 2 and
// every chunk changed, each drop rewrote two snapshots' bytes). Smaller
// snapshots share packs. Compaction's copies get packs of their own too.
inline constexpr uint64_t kPackRotateAtCommitBytes = uint64_t{4} << 20;
// Compaction rewrites the live chunks of a pack whose live bytes fell below
// this fraction of its chunk bytes: pack files then stay under about
// 1 / kCompactBelow times the live bytes (plus the packs still written).
inline constexpr double kCompactBelow = 0.75;
// Chunk deletions are written in batches of this many keys.
inline constexpr size_t kGcBatch = 1024;
inline constexpr size_t kDefaultDeltaBaseCacheBytes = size_t{1} << 30;

class ChunkStore {
 public:
  // `pool` (may be null for a store that never reads tensors: the probes of
  // an open) runs parallel reads; both must outlive the chunk store.
  ChunkStore(DbSession& session, boost::asio::thread_pool* pool, int threads)
      : session_(session), pool_(pool), threads_(threads) {}

  // Opens the pack files; a writable store then recovers them (RecoverPacks)
  // and notes the damage found (NoteDamage). `fsync` false: pack syncs only
  // count bytes as durable (StoreOptions::sync off). Caller holds a view.
  Status Open(bool fsync);
  // RecoverPacks on a read-only instance of the existing store at `path`,
  // holding the store's LOCK file meanwhile (so that no writer runs): it
  // writes nothing to the database, so it works on a full disk.
  static Status RecoverBeforeOpen(const std::string& path, rocksdb::Env* env);

  // After the session swapped its instance (DbSession::set_on_swap): drops
  // what was learnt from the old one.
  void OnSwap();

  ChunkRegistry& registry() { return registry_; }
  DeltaBaseCache& delta_bases() { return delta_bases_; }
  PackSet& packs() { return *packs_; }

  // --- the index ------------------------------------------------------------------
  // The index entry of `hash` at `ro`; none when the index lacks it.
  Result<std::optional<PackEntry>> LookupEntry(const ChunkHash& hash, const rocksdb::ReadOptions& ro);
  // Whether a usable chunk `hash` is indexed; its stored size when it is (a
  // writer deduplicates onto it). Takes a view itself.
  Result<std::optional<uint64_t>> LookupChunk(const ChunkHash& hash);
  // hash -> base hash for every delta chunk (chunk_deps CF).
  Status ReadChunkDeps(std::unordered_map<ChunkHash, ChunkHash, ChunkHashHasher>* deps);
  // Adds to `live` every chunk a delta chain of a live chunk needs.
  Status AddDeltaBases(std::unordered_map<ChunkHash, uint64_t, ChunkHashHasher>* live);

  // --- writing ----------------------------------------------------------------------
  // Appends an encoded chunk to the pack files; nothing refers to it until a
  // commit indexes it. Not durable until that commit syncs the packs.
  Result<PackEntry> PutChunk(const ChunkHash& hash, const std::string& encoded);
  // Pack numbers a writer begun now may use are at least the returned one;
  // compaction leaves them alone until the floor is released.
  uint32_t AcquireWriterFloor();
  void ReleaseWriterFloor(uint32_t floor);
  // Before a commit that indexes `chunks`: makes the pack files durable
  // (Aborted when a chunk's pack was retired by a failed write or sync),
  // then adds their index entries (and a delta's chunk_deps entry) to
  // *batch. Caller holds a view.
  Status IndexForCommit(const std::vector<NewChunk>& chunks, const std::string& context, rocksdb::WriteBatch* batch);
  // After the batch of IndexForCommit committed: the chunks are stored (and
  // usable again if they were not). Ends the active pack once it holds
  // kPackRotateAtCommitBytes.
  void NoteIndexed(const std::vector<NewChunk>& chunks);
  // Deletes the unpinned `candidates` (sizes[i] = encoded bytes of
  // candidates[i]) from the index and adds them to `report`. Caller holds a
  // view and serializes maintenance.
  Result<GcReport> EraseChunks(std::vector<ChunkHash> candidates, const std::vector<uint64_t>& sizes, GcReport report);

  // --- reading ----------------------------------------------------------------------
  // Reads many tensors at once (Store::ReadTensors). Caller holds a view.
  Status ReadTensors(const std::vector<TensorRead>& reads);
  // The encoded bytes of chunk `hash` (its index entry read at `ro`) into
  // *out. Corruption when the index lacks it or its pack is short.
  Status ReadChunkValue(const ChunkHash& hash, const rocksdb::ReadOptions& ro, std::string* out);
  // The same for a caller that has looked up the chunk's index entry
  // already: reads `entry`'s bytes, and where that fails, again where the
  // index names the chunk now (a compaction may have moved it, more than
  // once).
  Status ReadChunkValueAt(const ChunkHash& hash, PackEntry entry, std::string* out);
  // Decodes the encoded chunk `value` (ref.raw_bytes long) into dst and
  // checks its hash; a delta chunk's base is read and decoded into dst first
  // (recursively), and the delta applied there. Only the result is hashed:
  // when it does not match, the base is decoded again on its own and
  // checked, so that the error names the damaged chunk (the base or the
  // delta). The base's depth is not checked against the delta's header: the
  // base's bytes are what its hash names, whichever encoding holds them
  // (captures in flight share one encoding of a chunk, ChunkRegistry; a
  // store written before that may index another one). A chain longer than
  // `depth_budget` links (a cycle) is Corruption. `check_hash` false: the
  // caller checks the bytes (a delta's base, checked through the delta).
  Status ReadChunkInto(const ChunkRef& ref, std::string_view value, uint8_t* dst, int depth_budget = kMaxDeltaDepth,
                       bool check_hash = true);
  // The raw bytes of a metadata chunk (a record group, a shared manifest),
  // read and hash-checked at `ro`; errors name `where`.
  Result<std::string> ReadMetadataChunk(const ChunkRef& chunk, const std::string& where,
                                        const rocksdb::ReadOptions& ro);
  // The answer for a chunk that a read found no longer stored.
  static Status ChunkGone(const ChunkHash& hash);

  // --- damage (docs/reliability.md, "Damaged packs") ------------------------------
  // Marks unusable (ChunkRegistry::MarkUnusable) every chunk whose bytes
  // `damage` lost, and the deltas of them; packs noted before with the same
  // size are skipped. Caller holds a view. Read-only stores: no-op.
  Status NoteDamage(const std::vector<PackDamage>& damage);
  // Marks `hashes` and every delta chunk built on them (chunk_deps) unusable.
  Status MarkUnusableWithDeltas(std::vector<ChunkHash> hashes);
  bool Unusable(const ChunkHash& hash) const { return registry_.Unusable(hash); }
  size_t unusable() const { return registry_.unusable(); }

  // --- maintenance ------------------------------------------------------------------
  // Removes packs with no live chunk and rewrites the live chunks of packs
  // whose live fraction fell below kCompactBelow, oldest first, within the
  // free space; each pack in three durable steps (copies synced, index
  // entries moved in one synced batch, old pack deleted), so that a crash
  // at any point loses nothing live. Skips packs writers may still append
  // to or commit from, and damaged ones (report->damaged_packs). Caller
  // holds a view and serializes maintenance.
  Status CompactPacks(GcReport* report);
  // Live chunk bytes in packs after the last CompactPacks.
  uint64_t live_pack_bytes() const { return live_pack_bytes_.load(); }

 private:
  // Which step of a chunk read failed: the pack file (missing, short,
  // unreadable) or the bytes read (decode, hash).
  enum class ReadFailure { kPack, kContent };
  struct ChunkRead {
    const ChunkRef* ref;
    uint8_t* dst;
    size_t read;   // index into the reads
    size_t index;  // chunk index within its tensor
  };
  rocksdb::DB* db() const { return session_.db(); }
  rocksdb::ColumnFamilyHandle* chunks_cf() const { return session_.cf(ColumnFamily::kChunks); }
  rocksdb::ColumnFamilyHandle* chunk_deps_cf() const { return session_.cf(ColumnFamily::kChunkDeps); }

  // After a crash: deletes pack files that no index entry references and
  // truncates every other pack after the end of its last referenced chunk
  // (bytes a capture appended but never committed). Writable opens only,
  // before any writer exists. Skipped (nothing changed) when an index entry
  // does not parse: Verify reports it. *damage (if given) gets the packs the
  // index names that are missing or shorter than it says (left as they are).
  Status RecoverPacks(std::vector<PackDamage>* damage);
  // Reads chunk `ref` at `entry` into dst and checks its hash; on failure
  // *failure says where.
  Status ReadAndCheck(const ChunkRef& ref, const PackEntry& entry, uint8_t* dst, ReadFailure* failure);
  // Reads chunk `ref`, whose index entry is `entry`, into dst (raw chunks
  // straight from the pack, others decoded from a buffer) and checks its
  // hash. A read that fails is retried where the index names the chunk now
  // (CurrentEntry), following a few moves.
  Status ReadChunkAt(const ChunkRef& ref, PackEntry entry, uint8_t* dst);
  // Reads and decodes chunks[begin, end): one MultiGet of their index
  // entries, then ReadChunkAt each; the first error per read goes to
  // errors[read], guarded by errors_mu.
  void ReadChunkBatch(const std::vector<ChunkRead>& chunks, size_t begin, size_t end,
                      const std::vector<TensorRead>& reads, std::vector<Status>* errors, std::mutex* errors_mu);
  // Where chunk `hash` is indexed now, for a read at `failed` that did not
  // find its bytes (none: no longer stored). A writable store's own index
  // is current. A read-only instance sees the store as of its open: the
  // chunk is looked up in a newer instance, opened after the failure (the
  // chunk moved, or was collected with its deleted snapshot since). A pack
  // for which two newer instances, one opened after the other, still named
  // the failed bytes is really damaged and not looked up again.
  Result<std::optional<PackEntry>> CurrentEntry(const ChunkHash& hash, const PackEntry& failed);
  // After a read of chunk `hash` at `entry` failed for good: a writable store
  // looks at the pack file (kPack) or marks the chunk unusable (kContent).
  void NoteFailedRead(const ChunkHash& hash, const PackEntry& entry, ReadFailure failure);

  DbSession& session_;
  boost::asio::thread_pool* const pool_;
  const int threads_;
  // The file system of the session's env (or the default one): pack files
  // go through it.
  std::shared_ptr<rocksdb::FileSystem> fs_;
  std::unique_ptr<PackSet> packs_;
  ChunkRegistry registry_;
  DeltaBaseCache delta_bases_;
  std::atomic<uint64_t> live_pack_bytes_{0};

  Mutex floors_mu_;
  std::multiset<uint32_t> writer_floors_ GUARDED_BY(floors_mu_);
  // Writable stores: packs found damaged (NoteDamage), by number.
  Mutex damage_mu_;
  std::map<uint32_t, PackDamage> damaged_packs_ GUARDED_BY(damage_mu_);
  // Read-only stores: packs a newer instance confirmed damaged.
  Mutex confirmed_mu_;
  std::set<uint32_t> confirmed_damaged_ GUARDED_BY(confirmed_mu_);
};

}  // namespace trainsnap::internal
