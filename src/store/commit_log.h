// CommitLog: a small file beside RocksDB's, `trainsnap-commits`, that records
// how many write transactions (commits, deletes) the store made and its
// newest step. RocksDB replays a damaged, cut or deleted write-ahead log up
// to the last intact record without an error; this file lets the store tell
// such a rollback from a store that never had those commits
// (docs/reliability.md, "Lost commits"; layout in docs/format.md).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

struct CommitLogState {
  uint64_t transactions = 0;           // write transactions the database committed
  std::optional<int64_t> newest_step;  // newest stored step after them; none if empty
  // A loss found earlier and not yet acknowledged: it stays recorded until
  // the operator accepts it, also across commits and reopens.
  std::optional<LostCommits> loss;
};

class CommitLog {
 public:
  static constexpr char kFileName[] = "trainsnap-commits";

  // The state in `dir`/trainsnap-commits; none when the file does not exist.
  // Corruption when neither of its two slots is intact; IOError naming the
  // file when it cannot be read.
  static Result<std::optional<CommitLogState>> Read(const std::string& dir);

  // Opens the file for writing and writes `state` (creating the file, and
  // syncing its directory entry, when absent). With `sync` every Write is
  // fdatasync'ed.
  static Result<std::unique_ptr<CommitLog>> Open(const std::string& dir, bool sync, const CommitLogState& state);
  ~CommitLog();
  CommitLog(const CommitLog&) = delete;
  CommitLog& operator=(const CommitLog&) = delete;

  // Overwrites the older of the two slots, so that a torn write leaves the
  // previous state readable. Not thread-safe: the store calls it under its
  // commit mutex.
  Status Write(const CommitLogState& state);

 private:
  CommitLog(int fd, std::string path, bool sync) : fd_(fd), path_(std::move(path)), sync_(sync) {}
  int fd_ = -1;
  std::string path_;
  bool sync_ = true;
  uint64_t sequence_ = 0;  // of the last slot written
};

}  // namespace trainsnap::internal
