// FaultInjectionFS: a rocksdb::FileSystemWrapper for tests that fails chosen
// file-system operations on command, simulates a full disk, and simulates
// power loss by dropping what was not synced. Built on RocksDB 7.8's public
// FileSystem API (its own FaultInjectionTestFS is not shipped in Debian).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

namespace trainsnap::testing {

// Operation kinds that can be failed. Counted separately and together.
enum class FsOp : int { kCreate = 0, kAppend, kSync, kRename, kRead, kDirSync, kCount };
const char* FsOpName(FsOp op);

class FaultInjectionFS : public rocksdb::FileSystemWrapper {
 public:
  explicit FaultInjectionFS(std::shared_ptr<rocksdb::FileSystem> base = rocksdb::FileSystem::Default());

  static const char* kClassName() { return "TrainsnapFaultInjectionFS"; }
  const char* Name() const override { return kClassName(); }

  // --- failure schedule -------------------------------------------------------
  // Fail the `nth` (1-based, counted from this call) operation of kind `op`
  // with NoSpace (no_space) or IOError. persistent: keep failing every later
  // operation of that kind until ClearFaults().
  void FailNth(FsOp op, uint64_t nth, bool persistent, bool no_space);
  // Fail any data-writing operation (append, create, sync) once more than
  // `bytes` have been appended since this call (a full disk). Persistent.
  void SetByteBudget(uint64_t bytes);
  void ClearFaults();
  // How many operations of `op` ran since construction (faults included).
  uint64_t Count(FsOp op) const;
  uint64_t faults_injected() const;

  // --- power loss ------------------------------------------------------------
  // Truncates every file written through this FS to its last synced size and
  // deletes files created since their directory was last synced. Call only
  // while nothing has the files open (the DB is closed).
  rocksdb::IOStatus DropUnsyncedData();
  // Copies directory `dir` to `dest` as a power loss at this instant would
  // leave it, without touching `dir`: a file written through this FS keeps
  // only its synced bytes, and is left out if its directory entry was never
  // synced; files this FS never wrote are copied whole. The DB may stay open
  // (a crash without a clean close), but no write may be in flight.
  rocksdb::IOStatus CopySyncedState(const std::string& dir, const std::string& dest) const;

  // --- corruption on read -------------------------------------------------------
  // Flip one bit of the data returned by the `nth` read (1-based, counted from
  // this call) of a file whose name ends with `suffix` (e.g. ".blob", ".sst";
  // "" = any file); persistent: of every later such read too. The file itself
  // is untouched. The reads that were corrupted are counted.
  void FlipBitOnRead(const std::string& suffix, uint64_t nth, bool persistent);
  uint64_t reads_corrupted() const;
  // Called by the file wrappers after a successful read.
  void MaybeCorruptRead(const std::string& fname, rocksdb::Slice* result, char* scratch);

  // --- FileSystem overrides --------------------------------------------------
  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                                      const rocksdb::FileOptions& opts,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomAccessFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
                                        rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewSequentialFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                      std::unique_ptr<rocksdb::FSSequentialFile>* result,
                                      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& io_opts,
                                 std::unique_ptr<rocksdb::FSDirectory>* result,
                                 rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& target,
                               const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& fname, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;

  // --- used by the file wrappers ----------------------------------------------
  // Counts one operation and returns the injected error, if any is due.
  rocksdb::IOStatus MaybeFail(FsOp op, const std::string& fname, uint64_t append_bytes = 0);
  void OnAppend(const std::string& fname, uint64_t bytes);
  void OnSync(const std::string& fname);
  void OnDirSync(const std::string& dir);

 private:
  struct FileState {
    uint64_t size = 0;         // bytes appended so far
    uint64_t synced_size = 0;  // bytes durable after the last Sync/Fsync
    bool dir_synced = false;   // the file's directory entry is durable
  };
  struct Fault {
    uint64_t countdown = 0;  // 0 = disarmed
    bool persistent = false;
    bool no_space = false;
    bool firing = false;
  };
  rocksdb::IOStatus MakeError(bool no_space, FsOp op, const std::string& fname);
  // CopySyncedState, recursing into subdirectories; caller holds mu_.
  rocksdb::IOStatus CopySyncedStateLocked(const std::string& dir, const std::string& dest) const;

  mutable std::mutex mu_;
  std::map<std::string, FileState> files_;
  Fault faults_[static_cast<int>(FsOp::kCount)];
  uint64_t counts_[static_cast<int>(FsOp::kCount)] = {};
  uint64_t injected_ = 0;
  bool budget_armed_ = false;
  uint64_t budget_left_ = 0;
  std::string flip_suffix_;
  uint64_t flip_countdown_ = 0;  // 0 = disarmed
  bool flip_persistent_ = false;
  bool flip_firing_ = false;
  uint64_t reads_corrupted_ = 0;
};

// An Env that routes file operations through `fs` (and everything else to the
// default Env). Keep the FS alive as long as the Env.
std::unique_ptr<rocksdb::Env> NewFaultInjectionEnv(const std::shared_ptr<FaultInjectionFS>& fs);

}  // namespace trainsnap::testing
