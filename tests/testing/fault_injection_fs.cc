#include "testing/fault_injection_fs.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

namespace trainsnap::testing {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

std::string DirOf(const std::string& fname) {
  auto pos = fname.rfind('/');
  return pos == std::string::npos ? std::string(".") : fname.substr(0, pos);
}

class WritableFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  WritableFile(std::unique_ptr<rocksdb::FSWritableFile> t, std::string fname, FaultInjectionFS* fs)
      : FSWritableFileOwnerWrapper(std::move(t)), fname_(std::move(fname)), fs_(fs) {}

  IOStatus Append(const Slice& data, const IOOptions& o, IODebugContext* d) override {
    IOStatus s = fs_->MaybeFail(FsOp::kAppend, fname_, data.size());
    if (!s.ok()) return s;
    s = target()->Append(data, o, d);
    if (s.ok()) fs_->OnAppend(fname_, data.size());
    return s;
  }
  IOStatus Append(const Slice& data, const IOOptions& o, const rocksdb::DataVerificationInfo& v,
                  IODebugContext* d) override {
    IOStatus s = fs_->MaybeFail(FsOp::kAppend, fname_, data.size());
    if (!s.ok()) return s;
    s = target()->Append(data, o, v, d);
    if (s.ok()) fs_->OnAppend(fname_, data.size());
    return s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& o,
                            IODebugContext* d) override {
    IOStatus s = fs_->MaybeFail(FsOp::kAppend, fname_, data.size());
    if (!s.ok()) return s;
    s = target()->PositionedAppend(data, offset, o, d);
    if (s.ok()) fs_->OnAppend(fname_, data.size());
    return s;
  }
  IOStatus Sync(const IOOptions& o, IODebugContext* d) override { return DoSync(o, d, false); }
  IOStatus Fsync(const IOOptions& o, IODebugContext* d) override { return DoSync(o, d, true); }
  IOStatus RangeSync(uint64_t, uint64_t, const IOOptions&, IODebugContext*) override {
    // A range sync is not a durability point for the power-loss model.
    return IOStatus::OK();
  }

 private:
  IOStatus DoSync(const IOOptions& o, IODebugContext* d, bool full) {
    IOStatus s = fs_->MaybeFail(FsOp::kSync, fname_);
    if (!s.ok()) return s;
    s = full ? target()->Fsync(o, d) : target()->Sync(o, d);
    if (s.ok()) fs_->OnSync(fname_);
    return s;
  }

  std::string fname_;
  FaultInjectionFS* fs_;
};

class RandomAccessFile : public rocksdb::FSRandomAccessFileOwnerWrapper {
 public:
  RandomAccessFile(std::unique_ptr<rocksdb::FSRandomAccessFile> t, std::string fname, FaultInjectionFS* fs)
      : FSRandomAccessFileOwnerWrapper(std::move(t)), fname_(std::move(fname)), fs_(fs) {}

  IOStatus Read(uint64_t offset, size_t n, const IOOptions& o, Slice* result, char* scratch,
                IODebugContext* d) const override {
    IOStatus s = fs_->MaybeFail(FsOp::kRead, fname_);
    if (!s.ok()) return s;
    s = target()->Read(offset, n, o, result, scratch, d);
    if (s.ok()) fs_->MaybeCorruptRead(fname_, result, scratch);
    return s;
  }
  IOStatus MultiRead(rocksdb::FSReadRequest* reqs, size_t num_reqs, const IOOptions& o,
                     IODebugContext* d) override {
    IOStatus s = fs_->MaybeFail(FsOp::kRead, fname_);
    if (!s.ok()) {
      for (size_t i = 0; i < num_reqs; ++i) reqs[i].status = s;
      return s;
    }
    s = target()->MultiRead(reqs, num_reqs, o, d);
    for (size_t i = 0; s.ok() && i < num_reqs; ++i) {
      if (reqs[i].status.ok()) fs_->MaybeCorruptRead(fname_, &reqs[i].result, reqs[i].scratch);
    }
    return s;
  }

 private:
  std::string fname_;
  FaultInjectionFS* fs_;
};

class SequentialFile : public rocksdb::FSSequentialFileOwnerWrapper {
 public:
  SequentialFile(std::unique_ptr<rocksdb::FSSequentialFile> t, std::string fname, FaultInjectionFS* fs)
      : FSSequentialFileOwnerWrapper(std::move(t)), fname_(std::move(fname)), fs_(fs) {}

  IOStatus Read(size_t n, const IOOptions& o, Slice* result, char* scratch, IODebugContext* d) override {
    IOStatus s = fs_->MaybeFail(FsOp::kRead, fname_);
    if (!s.ok()) return s;
    s = target()->Read(n, o, result, scratch, d);
    if (s.ok()) fs_->MaybeCorruptRead(fname_, result, scratch);
    return s;
  }

 private:
  std::string fname_;
  FaultInjectionFS* fs_;
};

class Directory : public rocksdb::FSDirectoryWrapper {
 public:
  Directory(std::unique_ptr<rocksdb::FSDirectory> t, std::string name, FaultInjectionFS* fs)
      : FSDirectoryWrapper(std::move(t)), name_(std::move(name)), fs_(fs) {}

  IOStatus Fsync(const IOOptions& o, IODebugContext* d) override {
    IOStatus s = fs_->MaybeFail(FsOp::kDirSync, name_);
    if (!s.ok()) return s;
    s = FSDirectoryWrapper::Fsync(o, d);
    if (s.ok()) fs_->OnDirSync(name_);
    return s;
  }
  IOStatus FsyncWithDirOptions(const IOOptions& o, IODebugContext* d,
                               const rocksdb::DirFsyncOptions& opts) override {
    IOStatus s = fs_->MaybeFail(FsOp::kDirSync, name_);
    if (!s.ok()) return s;
    s = FSDirectoryWrapper::FsyncWithDirOptions(o, d, opts);
    if (s.ok()) fs_->OnDirSync(name_);
    return s;
  }

 private:
  std::string name_;
  FaultInjectionFS* fs_;
};

}  // namespace

const char* FsOpName(FsOp op) {
  switch (op) {
    case FsOp::kCreate: return "create";
    case FsOp::kAppend: return "append";
    case FsOp::kSync: return "sync";
    case FsOp::kRename: return "rename";
    case FsOp::kRead: return "read";
    case FsOp::kDirSync: return "dirsync";
    case FsOp::kCount: break;
  }
  return "?";
}

FaultInjectionFS::FaultInjectionFS(std::shared_ptr<rocksdb::FileSystem> base)
    : FileSystemWrapper(std::move(base)) {}

void FaultInjectionFS::FailNth(FsOp op, uint64_t nth, bool persistent, bool no_space) {
  std::lock_guard<std::mutex> lock(mu_);
  Fault& f = faults_[static_cast<int>(op)];
  f.countdown = nth;
  f.persistent = persistent;
  f.no_space = no_space;
  f.firing = false;
}

void FaultInjectionFS::SetByteBudget(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  budget_armed_ = true;
  budget_left_ = bytes;
}

void FaultInjectionFS::ClearFaults() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Fault& f : faults_) f = Fault{};
  budget_armed_ = false;
  flip_countdown_ = 0;
  flip_firing_ = false;
}

void FaultInjectionFS::FlipBitOnRead(const std::string& suffix, uint64_t nth, bool persistent) {
  std::lock_guard<std::mutex> lock(mu_);
  flip_suffix_ = suffix;
  flip_countdown_ = nth;
  flip_persistent_ = persistent;
  flip_firing_ = false;
}

uint64_t FaultInjectionFS::reads_corrupted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reads_corrupted_;
}

void FaultInjectionFS::MaybeCorruptRead(const std::string& fname, Slice* result, char* scratch) {
  std::lock_guard<std::mutex> lock(mu_);
  if (result->empty() || scratch == nullptr) return;
  if (!flip_firing_ && flip_countdown_ == 0) return;
  if (fname.size() < flip_suffix_.size() ||
      fname.compare(fname.size() - flip_suffix_.size(), flip_suffix_.size(), flip_suffix_) != 0) {
    return;
  }
  if (!flip_firing_) {
    if (--flip_countdown_ > 0) return;
    flip_firing_ = flip_persistent_;
  }
  // The data may live in a buffer of the base file (e.g. mmap): corrupt a copy.
  if (result->data() != scratch) {
    std::memmove(scratch, result->data(), result->size());
    *result = Slice(scratch, result->size());
  }
  // A different byte and bit each time, deterministic for a given schedule.
  const uint64_t k = reads_corrupted_++;
  const size_t pos = static_cast<size_t>((result->size() / 2 + k * 7919) % result->size());
  scratch[pos] = static_cast<char>(scratch[pos] ^ (1u << (k % 8)));
}

uint64_t FaultInjectionFS::Count(FsOp op) const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_[static_cast<int>(op)];
}

uint64_t FaultInjectionFS::faults_injected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return injected_;
}

IOStatus FaultInjectionFS::MakeError(bool no_space, FsOp op, const std::string& fname) {
  ++injected_;
  std::string msg = std::string("injected fault: ") + FsOpName(op) + " " + fname;
  if (no_space) {
    IOStatus s = IOStatus::NoSpace(msg);
    return s;
  }
  return IOStatus::IOError(msg);
}

IOStatus FaultInjectionFS::MaybeFail(FsOp op, const std::string& fname, uint64_t append_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[static_cast<int>(op)];
  Fault& f = faults_[static_cast<int>(op)];
  if (f.firing) return MakeError(f.no_space, op, fname);
  if (f.countdown > 0 && --f.countdown == 0) {
    f.firing = f.persistent;
    return MakeError(f.no_space, op, fname);
  }
  if (budget_armed_ && (op == FsOp::kAppend || op == FsOp::kCreate || op == FsOp::kSync)) {
    if (append_bytes > budget_left_ || (budget_left_ == 0 && op != FsOp::kSync)) {
      budget_left_ = 0;
      return MakeError(true, op, fname);
    }
    budget_left_ -= append_bytes;
  }
  return IOStatus::OK();
}

void FaultInjectionFS::OnAppend(const std::string& fname, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  files_[fname].size += bytes;
}

void FaultInjectionFS::OnSync(const std::string& fname) {
  std::lock_guard<std::mutex> lock(mu_);
  FileState& st = files_[fname];
  st.synced_size = st.size;
}

void FaultInjectionFS::OnDirSync(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, st] : files_) {
    if (DirOf(name) == dir) st.dir_synced = true;
  }
}

IOStatus FaultInjectionFS::NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                           std::unique_ptr<rocksdb::FSWritableFile>* result,
                                           IODebugContext* dbg) {
  IOStatus s = MaybeFail(FsOp::kCreate, fname);
  if (!s.ok()) return s;
  std::unique_ptr<rocksdb::FSWritableFile> file;
  s = target()->NewWritableFile(fname, opts, &file, dbg);
  if (!s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    files_[fname] = FileState{};  // a new, empty, not yet durable file
  }
  *result = std::make_unique<WritableFile>(std::move(file), fname, this);
  return s;
}

IOStatus FaultInjectionFS::ReopenWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                              std::unique_ptr<rocksdb::FSWritableFile>* result,
                                              IODebugContext* dbg) {
  IOStatus s = MaybeFail(FsOp::kCreate, fname);
  if (!s.ok()) return s;
  std::unique_ptr<rocksdb::FSWritableFile> file;
  s = target()->ReopenWritableFile(fname, opts, &file, dbg);
  if (!s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(fname);
    if (it == files_.end()) {
      // An existing file from before: everything in it counts as durable.
      uint64_t size = 0;
      std::error_code ec;
      size = std::filesystem::file_size(fname, ec);
      files_[fname] = FileState{size, size, true};
    }
  }
  *result = std::make_unique<WritableFile>(std::move(file), fname, this);
  return s;
}

IOStatus FaultInjectionFS::ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                                             const rocksdb::FileOptions& opts,
                                             std::unique_ptr<rocksdb::FSWritableFile>* result,
                                             IODebugContext* dbg) {
  // Rename + truncate in the base FS; model it as a fresh file.
  IOStatus s = MaybeFail(FsOp::kCreate, fname);
  if (!s.ok()) return s;
  std::unique_ptr<rocksdb::FSWritableFile> file;
  s = target()->ReuseWritableFile(fname, old_fname, opts, &file, dbg);
  if (!s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    files_.erase(old_fname);
    files_[fname] = FileState{};
  }
  *result = std::make_unique<WritableFile>(std::move(file), fname, this);
  return s;
}

IOStatus FaultInjectionFS::NewRandomAccessFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                               std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
                                               IODebugContext* dbg) {
  std::unique_ptr<rocksdb::FSRandomAccessFile> file;
  IOStatus s = target()->NewRandomAccessFile(fname, opts, &file, dbg);
  if (!s.ok()) return s;
  *result = std::make_unique<RandomAccessFile>(std::move(file), fname, this);
  return s;
}

IOStatus FaultInjectionFS::NewSequentialFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                             std::unique_ptr<rocksdb::FSSequentialFile>* result,
                                             IODebugContext* dbg) {
  std::unique_ptr<rocksdb::FSSequentialFile> file;
  IOStatus s = target()->NewSequentialFile(fname, opts, &file, dbg);
  if (!s.ok()) return s;
  *result = std::make_unique<SequentialFile>(std::move(file), fname, this);
  return s;
}

IOStatus FaultInjectionFS::NewDirectory(const std::string& name, const IOOptions& io_opts,
                                        std::unique_ptr<rocksdb::FSDirectory>* result, IODebugContext* dbg) {
  std::unique_ptr<rocksdb::FSDirectory> dir;
  IOStatus s = target()->NewDirectory(name, io_opts, &dir, dbg);
  if (!s.ok()) return s;
  *result = std::make_unique<Directory>(std::move(dir), name, this);
  return s;
}

IOStatus FaultInjectionFS::RenameFile(const std::string& src, const std::string& dst, const IOOptions& options,
                                      IODebugContext* dbg) {
  IOStatus s = MaybeFail(FsOp::kRename, src);
  if (!s.ok()) return s;
  s = target()->RenameFile(src, dst, options, dbg);
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(src);
  FileState st = it != files_.end() ? it->second : FileState{};
  if (it != files_.end()) files_.erase(it);
  // The new name is durable only after its directory is synced.
  st.dir_synced = false;
  if (it == files_.end()) {
    std::error_code ec;
    st.size = st.synced_size = std::filesystem::file_size(dst, ec);
  }
  files_[dst] = st;
  return s;
}

IOStatus FaultInjectionFS::DeleteFile(const std::string& fname, const IOOptions& options, IODebugContext* dbg) {
  IOStatus s = target()->DeleteFile(fname, options, dbg);
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    files_.erase(fname);
  }
  return s;
}

IOStatus FaultInjectionFS::DropUnsyncedData() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = files_.begin(); it != files_.end();) {
    const std::string& name = it->first;
    const FileState& st = it->second;
    if (!st.dir_synced) {
      // The directory entry was never made durable: the file is gone.
      if (::unlink(name.c_str()) != 0 && errno != ENOENT) {
        return IOStatus::IOError("power-loss simulation: unlink " + name);
      }
      it = files_.erase(it);
      continue;
    }
    if (st.synced_size < st.size) {
      if (::truncate(name.c_str(), static_cast<off_t>(st.synced_size)) != 0 && errno != ENOENT) {
        return IOStatus::IOError("power-loss simulation: truncate " + name);
      }
      it->second.size = st.synced_size;
    }
    ++it;
  }
  return IOStatus::OK();
}

IOStatus FaultInjectionFS::CopySyncedState(const std::string& dir, const std::string& dest) const {
  std::lock_guard<std::mutex> lock(mu_);
  return CopySyncedStateLocked(dir, dest);
}

IOStatus FaultInjectionFS::CopySyncedStateLocked(const std::string& dir, const std::string& dest) const {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dest, ec);
  if (ec) return IOStatus::IOError("power-loss image: create " + dest + ": " + ec.message());
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    // DeleteFile unlinks before it takes mu_: a file RocksDB deletes in the
    // background can vanish between the listing and the copy. It was being
    // deleted at the moment of the image, so the image does not hold it.
    std::error_code file_ec;
    if (e.is_directory(file_ec)) {
      // Subdirectories (a store's packs/) are copied the same way.
      IOStatus sub = CopySyncedStateLocked(e.path().string(), (fs::path(dest) / e.path().filename()).string());
      if (!sub.ok()) return sub;
      continue;
    }
    if (!e.is_regular_file(file_ec)) continue;
    const std::string name = (fs::path(dir) / e.path().filename()).string();
    uint64_t keep = UINT64_MAX;  // a file this FS never wrote: whole
    auto it = files_.find(name);
    if (it != files_.end()) {
      if (!it->second.dir_synced) continue;  // the directory entry is lost
      keep = it->second.synced_size;
    }
    const fs::path target = fs::path(dest) / e.path().filename();
    fs::copy_file(e.path(), target, fs::copy_options::overwrite_existing, file_ec);
    std::error_code gone_ec;
    if (file_ec == std::errc::no_such_file_or_directory && !fs::exists(e.path(), gone_ec)) {
      fs::remove(target, gone_ec);
      continue;
    }
    if (file_ec) return IOStatus::IOError("power-loss image: copy " + name + ": " + file_ec.message());
    if (keep != UINT64_MAX && keep < fs::file_size(target, ec)) {
      fs::resize_file(target, keep, ec);
      if (ec) return IOStatus::IOError("power-loss image: truncate " + target.string() + ": " + ec.message());
    }
  }
  if (ec) return IOStatus::IOError("power-loss image: list " + dir + ": " + ec.message());
  return IOStatus::OK();
}

std::unique_ptr<rocksdb::Env> NewFaultInjectionEnv(const std::shared_ptr<FaultInjectionFS>& fs) {
  return rocksdb::NewCompositeEnv(fs);
}

}  // namespace trainsnap::testing
