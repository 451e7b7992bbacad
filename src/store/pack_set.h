// PackSet: the append-only pack files of a store (<store>/packs/, see
// docs/format.md "Pack files"), written and read through a
// rocksdb::FileSystem so that the tests' fault injection covers them.
// Knows nothing of the chunk index: the store decides which bytes are live.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <rocksdb/file_system.h>

#include "common/mutex.h"
#include "store/pack_entry.h"
#include "trainsnap/status.h"

namespace trainsnap::internal {

inline constexpr char kPackDir[] = "packs";
// Every pack file starts with these 8 bytes; chunks follow back to back.
inline constexpr char kPackMagic[] = "TSPACK01";
inline constexpr size_t kPackHeaderBytes = 8;

// "pack-0000002a.pack" for pack 42.
std::string PackFileName(uint32_t pack);
// The number of a pack file name; nullopt for any other name.
std::optional<uint32_t> ParsePackFileName(std::string_view name);

// Thread-safe. Appends go to one active pack at a time; Sync makes every
// appended byte durable (file data, then the directory entries of new
// packs). A failed append or sync retires the pack it hit: its bytes past
// the last successful sync are never reported durable (IsDurable), and
// later appends open a new pack.
class PackSet {
 public:
  struct FileInfo {
    uint32_t pack = 0;
    uint64_t size = 0;
  };

  // `fs` (not owned) must outlive the set. A writable set creates the
  // directory when missing; new packs get numbers above `first_free`
  // (the caller passes one above every pack its index names) and above
  // every pack file present. Packs reach about `target_bytes` each.
  // `fsync` false: Sync only counts bytes as durable (StoreOptions::sync
  // off, for benchmarks and tests).
  static Result<std::unique_ptr<PackSet>> Open(rocksdb::FileSystem* fs, const std::string& store_path,
                                               bool writable, uint64_t target_bytes, bool fsync = true);
  ~PackSet();

  const std::string& dir() const { return dir_; }

  // The pack files present, by number (what Open found plus what this set
  // created and has not removed).
  Result<std::vector<FileInfo>> List();

  // --- writing (writable sets) -------------------------------------------------
  // Makes numbers up to `pack` unavailable for new packs (the index names them).
  void ReserveNumbers(uint32_t pack);
  // Appends `encoded` (a whole encoded chunk) to the active pack. IOError or
  // NoSpace: nothing usable was appended, and the pack is retired.
  Result<PackEntry> Append(std::string_view encoded, uint64_t raw_bytes, bool raw);
  // Makes every byte appended before the call durable; appends made
  // meanwhile (by other threads) wait for the next Sync. On failure the packs
  // whose fsync failed are retired (their synced prefix stays durable).
  Status Sync();
  // Whether `entry` lies within what is durable: true for packs this set did
  // not write (an earlier process committed them) and for synced bytes.
  bool IsDurable(const PackEntry& entry);
  // The pack appends go to now (none before the first append): compaction
  // never rewrites it.
  std::optional<uint32_t> active_pack();
  // The number the next append goes to: the active pack's, or the next new one's.
  uint32_t NextAppendPack();
  // The lowest pack number that has bytes not yet synced or a writer open
  // (none when every pack is closed).
  std::optional<uint32_t> OldestOpenPack();
  // Whether `pack` still has a writer open in this set.
  bool IsOpen(uint32_t pack);
  // Ends appends to the active pack (the next append starts a new one); it
  // stays open until the next Sync makes its bytes durable.
  void Rotate();
  // Rotate when the active pack holds at least `bytes` (header included).
  void RotateIfAtLeast(uint64_t bytes);

  // --- maintenance (caller excludes readers of the pack) ------------------------
  Status Truncate(uint32_t pack, uint64_t size);
  Status Remove(uint32_t pack);

  // --- reading ---------------------------------------------------------------------
  // The `entry.length` encoded bytes into *out (resized). Corruption when the
  // pack is missing or shorter than the entry says.
  Status ReadEncoded(const PackEntry& entry, std::string* out);
  // A raw entry's raw_bytes straight into dst (no header read).
  Status ReadRawInto(const PackEntry& entry, uint8_t* dst);
  // `n` bytes at `offset` of `pack` into dst; Corruption on a short read.
  Status ReadAt(uint32_t pack, uint64_t offset, size_t n, uint8_t* dst);

 private:
  struct Writer {
    // Shared with a Sync in progress, which fsyncs it without mu_.
    std::shared_ptr<rocksdb::FSWritableFile> file;
    uint64_t size = 0;    // bytes appended
    uint64_t synced = 0;  // bytes durable
    bool dir_synced = false;
  };
  PackSet(rocksdb::FileSystem* fs, std::string dir, bool writable, uint64_t target_bytes, bool fsync);
  std::string PathOf(uint32_t pack) const { return dir_ + "/" + PackFileName(pack); }
  Result<std::shared_ptr<rocksdb::FSRandomAccessFile>> Reader(uint32_t pack);
  Status OpenNewPack() REQUIRES(mu_);
  void RetireLocked(uint32_t pack) REQUIRES(mu_);

  rocksdb::FileSystem* const fs_;
  const std::string dir_;
  const bool writable_;
  const uint64_t target_bytes_;
  const bool fsync_;

  Mutex sync_mu_ ACQUIRED_BEFORE(mu_);  // one Sync at a time
  Mutex mu_;  // guards the writing state below
  uint32_t next_pack_ GUARDED_BY(mu_) = 1;
  std::optional<uint32_t> active_ GUARDED_BY(mu_);
  // Packs this set created whose writer is open (the active one, and full
  // ones with unsynced bytes until the next Sync).
  std::map<uint32_t, Writer> writers_ GUARDED_BY(mu_);
  // Durable bytes of every pack this set created (retired ones included).
  std::map<uint32_t, uint64_t> durable_ GUARDED_BY(mu_);
  std::unique_ptr<rocksdb::FSDirectory> dir_handle_;

  Mutex readers_mu_;
  std::map<uint32_t, std::shared_ptr<rocksdb::FSRandomAccessFile>> readers_ GUARDED_BY(readers_mu_);
};

}  // namespace trainsnap::internal
