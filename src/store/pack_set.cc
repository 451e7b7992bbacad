#include "store/pack_set.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "store/chunk_codec.h"
#include "store/rocksdb_status.h"

namespace trainsnap::internal {

std::string PackFileName(uint32_t pack) {
  char name[32];
  std::snprintf(name, sizeof(name), "pack-%08" PRIx32 ".pack", pack);
  return name;
}

std::optional<uint32_t> ParsePackFileName(std::string_view name) {
  constexpr std::string_view kPrefix = "pack-", kSuffix = ".pack";
  if (name.size() != kPrefix.size() + 8 + kSuffix.size() || name.substr(0, kPrefix.size()) != kPrefix ||
      name.substr(kPrefix.size() + 8) != kSuffix) {
    return std::nullopt;
  }
  uint32_t v = 0;
  for (char c : name.substr(kPrefix.size(), 8)) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return std::nullopt;
    }
    v = v << 4 | static_cast<uint32_t>(d);
  }
  if (v == 0) return std::nullopt;  // numbers start at 1
  return v;
}

PackSet::PackSet(rocksdb::FileSystem* fs, std::string dir, bool writable, uint64_t target_bytes, bool fsync)
    : fs_(fs), dir_(std::move(dir)), writable_(writable), target_bytes_(target_bytes), fsync_(fsync) {}

PackSet::~PackSet() {
  // Unsynced bytes are dropped on purpose: nothing committed refers to them.
  for (auto& [pack, w] : writers_) w.file->Close(rocksdb::IOOptions(), nullptr).PermitUncheckedError();
}

Result<std::unique_ptr<PackSet>> PackSet::Open(rocksdb::FileSystem* fs, const std::string& store_path, bool writable,
                                               uint64_t target_bytes, bool fsync) {
  std::unique_ptr<PackSet> set(new PackSet(fs, store_path + "/" + kPackDir, writable, target_bytes, fsync));
  const rocksdb::IOOptions io;
  if (writable) {
    bool existed = fs->FileExists(set->dir_, io, nullptr).ok();
    if (!existed) {
      TRAINSNAP_RETURN_IF_ERROR(FromRocks(fs->CreateDirIfMissing(set->dir_, io, nullptr), "create " + set->dir_));
      // The new directory's entry must survive a power loss before any pack
      // in it is committed.
      std::unique_ptr<rocksdb::FSDirectory> parent;
      rocksdb::IOStatus s = fs->NewDirectory(store_path, io, &parent, nullptr);
      if (s.ok()) s = parent->FsyncWithDirOptions(io, nullptr, rocksdb::DirFsyncOptions());
      TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "sync " + store_path));
    }
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(fs->NewDirectory(set->dir_, io, &set->dir_handle_, nullptr), set->dir_));
  }
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<FileInfo> files, set->List());
  for (const FileInfo& f : files) set->ReserveNumbers(f.pack);
  return set;
}

Result<std::vector<PackSet::FileInfo>> PackSet::List() {
  const rocksdb::IOOptions io;
  std::vector<std::string> names;
  rocksdb::IOStatus s = fs_->GetChildren(dir_, io, &names, nullptr);
  if (s.IsNotFound() || s.IsPathNotFound()) return std::vector<FileInfo>();  // a read-only store without packs
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "list " + dir_));
  std::vector<FileInfo> out;
  for (const std::string& name : names) {
    std::optional<uint32_t> pack = ParsePackFileName(name);
    if (!pack) continue;
    uint64_t size = 0;
    rocksdb::IOStatus ss = fs_->GetFileSize(dir_ + "/" + name, io, &size, nullptr);
    if (ss.IsNotFound() || ss.IsPathNotFound()) continue;  // removed meanwhile
    TRAINSNAP_RETURN_IF_ERROR(FromRocks(ss, "size of " + name));
    out.push_back({*pack, size});
  }
  std::sort(out.begin(), out.end(), [](const FileInfo& a, const FileInfo& b) { return a.pack < b.pack; });
  return out;
}

void PackSet::ReserveNumbers(uint32_t pack) {
  MutexLock lock(&mu_);
  if (pack >= next_pack_) next_pack_ = pack + 1;
}

Status PackSet::OpenNewPack() {
  const uint32_t pack = next_pack_++;
  Writer w;
  rocksdb::FileOptions options;
  std::unique_ptr<rocksdb::FSWritableFile> file;
  TRAINSNAP_RETURN_IF_ERROR(
      FromRocks(fs_->NewWritableFile(PathOf(pack), options, &file, nullptr), "create " + PackFileName(pack)));
  w.file = std::move(file);
  rocksdb::IOStatus s = w.file->Append(rocksdb::Slice(kPackMagic, kPackHeaderBytes), rocksdb::IOOptions(), nullptr);
  if (!s.ok()) {
    w.file->Close(rocksdb::IOOptions(), nullptr).PermitUncheckedError();
    durable_[pack] = 0;
    return FromRocks(s, "write " + PackFileName(pack));
  }
  w.size = kPackHeaderBytes;
  durable_[pack] = 0;
  writers_.emplace(pack, std::move(w));
  active_ = pack;
  return Status::OK();
}

void PackSet::RetireLocked(uint32_t pack) {
  auto w = writers_.find(pack);
  if (w != writers_.end()) {
    // A Sync fsyncing it (without mu_) holds another reference: the last
    // one closes the file when it goes.
    if (w->second.file.use_count() == 1) w->second.file->Close(rocksdb::IOOptions(), nullptr).PermitUncheckedError();
    writers_.erase(w);
  }
  if (active_ == pack) active_.reset();
}

Result<PackEntry> PackSet::Append(std::string_view encoded, uint64_t raw_bytes, bool raw) {
  if (!writable_) return Status::NotSupported("append to " + dir_ + ": read-only");
  if (encoded.size() > UINT32_MAX) return Status::InvalidArgument("chunk of " + std::to_string(encoded.size()) + " bytes");
  MutexLock lock(&mu_);
  if (active_ && writers_.at(*active_).size >= target_bytes_) {
    // Full: it stays open (unsynced bytes) until the next Sync.
    active_.reset();
  }
  if (!active_) TRAINSNAP_RETURN_IF_ERROR(OpenNewPack());
  const uint32_t pack = *active_;
  Writer& w = writers_.at(pack);
  rocksdb::IOStatus s = w.file->Append(rocksdb::Slice(encoded.data(), encoded.size()), rocksdb::IOOptions(), nullptr);
  if (!s.ok()) {
    // Part of the chunk may be in the file: nothing may follow it there.
    RetireLocked(pack);
    return FromRocks(s, "append to " + PackFileName(pack));
  }
  PackEntry e;
  e.pack = pack;
  e.offset = w.size;
  e.length = static_cast<uint32_t>(encoded.size());
  e.raw_bytes = raw_bytes;
  e.raw = raw;
  w.size += encoded.size();
  return e;
}

Status PackSet::Sync() {
  // One Sync at a time. The fsyncs run without mu_, so captures keep
  // appending (to the same active pack too) while another capture's commit
  // waits for the disk; a Sync covers the bytes appended before it began.
  MutexLock sync_lock(&sync_mu_);
  struct Pending {
    uint32_t pack;
    std::shared_ptr<rocksdb::FSWritableFile> file;
    uint64_t size;  // appended when the Sync began
  };
  std::vector<Pending> pending;
  std::vector<uint32_t> new_packs;  // whose directory entry is not yet durable
  {
    MutexLock lock(&mu_);
    for (auto& [pack, w] : writers_) {
      if (!w.dir_synced) new_packs.push_back(pack);
      if (w.synced != w.size) pending.push_back({pack, w.file, w.size});
    }
  }
  Status result;
  std::vector<uint32_t> failed;
  for (const Pending& p : pending) {
    rocksdb::IOStatus s = fsync_ ? p.file->Sync(rocksdb::IOOptions(), nullptr) : rocksdb::IOStatus::OK();
    if (!s.ok()) {
      // After a failed fsync the page cache may have dropped the dirty
      // pages: only what an earlier sync covered is durable.
      result = FromRocks(s, "sync " + PackFileName(p.pack));
      failed.push_back(p.pack);
    }
  }
  bool dir_failed = false;
  if (result.ok() && !new_packs.empty() && dir_handle_ && fsync_) {
    rocksdb::IOStatus s = dir_handle_->FsyncWithDirOptions(rocksdb::IOOptions(), nullptr, rocksdb::DirFsyncOptions());
    if (!s.ok()) {
      result = FromRocks(s, "sync " + dir_);
      dir_failed = true;
    }
  }
  MutexLock lock(&mu_);
  std::vector<uint32_t> done = failed;
  if (!dir_failed) {
    // What each successful fsync covered is durable (a failed fsync of one
    // pack does not undo another's).
    for (const Pending& p : pending) {
      if (std::find(failed.begin(), failed.end(), p.pack) != failed.end()) continue;
      durable_[p.pack] = std::max(durable_[p.pack], p.size);
      auto w = writers_.find(p.pack);
      if (w != writers_.end()) w->second.synced = std::max(w->second.synced, p.size);
    }
  }
  if (result.ok()) {
    for (uint32_t pack : new_packs) {
      auto w = writers_.find(pack);
      if (w != writers_.end()) w->second.dir_synced = true;
    }
  } else if (dir_failed) {
    // Without a durable directory entry none of the new packs is durable.
    for (uint32_t pack : new_packs) {
      durable_[pack] = 0;
      done.push_back(pack);
    }
  }
  // Packs no capture appends to any more and wholly durable are closed.
  for (const auto& [pack, w] : writers_) {
    if (active_ != pack && w.synced == w.size && w.dir_synced) done.push_back(pack);
  }
  for (uint32_t pack : done) RetireLocked(pack);
  return result;
}

bool PackSet::IsDurable(const PackEntry& entry) {
  MutexLock lock(&mu_);
  auto d = durable_.find(entry.pack);
  if (d == durable_.end()) return true;
  auto w = writers_.find(entry.pack);
  if (w != writers_.end() && !w->second.dir_synced) return false;
  return entry.end() <= d->second;
}

std::optional<uint32_t> PackSet::active_pack() {
  MutexLock lock(&mu_);
  return active_;
}

uint32_t PackSet::NextAppendPack() {
  MutexLock lock(&mu_);
  return active_ ? *active_ : next_pack_;
}

std::optional<uint32_t> PackSet::OldestOpenPack() {
  MutexLock lock(&mu_);
  if (writers_.empty()) return std::nullopt;
  return writers_.begin()->first;
}

bool PackSet::IsOpen(uint32_t pack) {
  MutexLock lock(&mu_);
  return writers_.count(pack) > 0;
}

void PackSet::Rotate() {
  MutexLock lock(&mu_);
  active_.reset();
}

void PackSet::RotateIfAtLeast(uint64_t bytes) {
  MutexLock lock(&mu_);
  if (active_ && writers_.at(*active_).size >= bytes) active_.reset();
}

Status PackSet::Truncate(uint32_t pack, uint64_t size) {
  {
    MutexLock lock(&mu_);
    if (writers_.count(pack)) return Status::InvalidArgument("truncate " + PackFileName(pack) + ": being written");
  }
  {
    MutexLock lock(&readers_mu_);
    readers_.erase(pack);
  }
  // Through a writable handle: rocksdb::FileSystem has no truncate by name.
  std::unique_ptr<rocksdb::FSWritableFile> file;
  rocksdb::IOStatus s = fs_->ReopenWritableFile(PathOf(pack), rocksdb::FileOptions(), &file, nullptr);
  if (s.ok()) s = file->Truncate(size, rocksdb::IOOptions(), nullptr);
  if (s.ok()) s = file->Sync(rocksdb::IOOptions(), nullptr);
  if (file) {
    rocksdb::IOStatus c = file->Close(rocksdb::IOOptions(), nullptr);
    if (s.ok()) s = c;
  }
  return FromRocks(s, "truncate " + PackFileName(pack) + " to " + std::to_string(size) + " bytes");
}

Status PackSet::Remove(uint32_t pack) {
  {
    MutexLock lock(&mu_);
    RetireLocked(pack);
  }
  {
    MutexLock lock(&readers_mu_);
    readers_.erase(pack);
  }
  rocksdb::IOStatus s = fs_->DeleteFile(PathOf(pack), rocksdb::IOOptions(), nullptr);
  if (s.IsNotFound() || s.IsPathNotFound()) return Status::OK();
  return FromRocks(s, "delete " + PackFileName(pack));
}

Result<std::shared_ptr<rocksdb::FSRandomAccessFile>> PackSet::Reader(uint32_t pack) {
  MutexLock lock(&readers_mu_);
  auto found = readers_.find(pack);
  if (found != readers_.end()) return found->second;
  std::unique_ptr<rocksdb::FSRandomAccessFile> file;
  rocksdb::IOStatus s = fs_->NewRandomAccessFile(PathOf(pack), rocksdb::FileOptions(), &file, nullptr);
  if (s.IsNotFound() || s.IsPathNotFound() || (!s.ok() && s.ToString().find("No such file") != std::string::npos)) {
    return Status::Corruption("pack file " + PackFileName(pack) + " is missing (a file of the store)");
  }
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "open " + PackFileName(pack)));
  std::shared_ptr<rocksdb::FSRandomAccessFile> shared(std::move(file));
  readers_.emplace(pack, shared);
  return shared;
}

Status PackSet::ReadAt(uint32_t pack, uint64_t offset, size_t n, uint8_t* dst) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::shared_ptr<rocksdb::FSRandomAccessFile> file, Reader(pack));
  rocksdb::Slice result;
  rocksdb::IOStatus s =
      file->Read(offset, n, rocksdb::IOOptions(), &result, reinterpret_cast<char*>(dst), nullptr);
  TRAINSNAP_RETURN_IF_ERROR(FromRocks(s, "read " + PackFileName(pack)));
  if (result.size() != n) {
    return Status::Corruption(PackFileName(pack) + ": " + std::to_string(n) + " bytes at offset " +
                              std::to_string(offset) + " read as " + std::to_string(result.size()) +
                              " (the file is shorter than the index says)");
  }
  if (result.data() != reinterpret_cast<const char*>(dst)) std::memcpy(dst, result.data(), n);
  return Status::OK();
}

Status PackSet::ReadEncoded(const PackEntry& entry, std::string* out) {
  out->resize(entry.length);
  return ReadAt(entry.pack, entry.offset, entry.length, reinterpret_cast<uint8_t*>(out->data()));
}

Status PackSet::ReadRawInto(const PackEntry& entry, uint8_t* dst) {
  if (!entry.raw) return Status::InvalidArgument("ReadRawInto: not a raw chunk");
  return ReadAt(entry.pack, entry.offset + kChunkHeaderBytes, entry.raw_bytes, dst);
}

}  // namespace trainsnap::internal
