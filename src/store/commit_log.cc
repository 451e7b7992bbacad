#include "store/commit_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <xxhash.h>

#include "store/errno_status.h"

namespace trainsnap::internal {
namespace {

// Two slots, one page apart so that a torn write of one (a sector or a page)
// cannot reach the other. Slot layout (little-endian):
//   0 magic "TSCL" | 4 version (1) | 5 flags | 6 reserved (2) | 8 sequence |
//   16 transactions | 24 newest step | 32 loss.recorded | 40 loss.found |
//   48 loss.newest_recorded | 56 loss.newest_found | 64 XXH3-64 of bytes 0..64
constexpr size_t kSlotBytes = 72;
constexpr off_t kSlotOffset[2] = {0, 4096};
constexpr char kMagic[4] = {'T', 'S', 'C', 'L'};
constexpr uint8_t kVersion = 1;
constexpr uint8_t kHasNewest = 1, kHasLoss = 2, kLossHasNewestFound = 4, kLossHasNewestRecorded = 8;

using Slot = std::array<uint8_t, kSlotBytes>;

void Put64(Slot& s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) s[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t Get64(const Slot& s, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{s[at + i]} << (8 * i);
  return v;
}

Slot Encode(const CommitLogState& state, uint64_t sequence) {
  Slot s{};
  std::memcpy(s.data(), kMagic, 4);
  s[4] = kVersion;
  uint8_t flags = 0;
  if (state.newest_step) flags |= kHasNewest;
  if (state.loss) {
    flags |= kHasLoss;
    if (state.loss->newest_found) flags |= kLossHasNewestFound;
    if (state.loss->newest_recorded) flags |= kLossHasNewestRecorded;
  }
  s[5] = flags;
  Put64(s, 8, sequence);
  Put64(s, 16, state.transactions);
  Put64(s, 24, static_cast<uint64_t>(state.newest_step.value_or(0)));
  if (state.loss) {
    Put64(s, 32, state.loss->recorded);
    Put64(s, 40, state.loss->found);
    Put64(s, 48, static_cast<uint64_t>(state.loss->newest_recorded.value_or(0)));
    Put64(s, 56, static_cast<uint64_t>(state.loss->newest_found.value_or(0)));
  }
  Put64(s, 64, XXH3_64bits(s.data(), 64));
  return s;
}

// The sequence and state of an intact slot; none otherwise.
std::optional<std::pair<uint64_t, CommitLogState>> Decode(const Slot& s) {
  if (std::memcmp(s.data(), kMagic, 4) != 0 || s[4] != kVersion) return std::nullopt;
  if (Get64(s, 64) != XXH3_64bits(s.data(), 64)) return std::nullopt;
  const uint8_t flags = s[5];
  CommitLogState state;
  state.transactions = Get64(s, 16);
  if (flags & kHasNewest) state.newest_step = static_cast<int64_t>(Get64(s, 24));
  if (flags & kHasLoss) {
    LostCommits loss;
    loss.recorded = Get64(s, 32);
    loss.found = Get64(s, 40);
    if (flags & kLossHasNewestRecorded) loss.newest_recorded = static_cast<int64_t>(Get64(s, 48));
    if (flags & kLossHasNewestFound) loss.newest_found = static_cast<int64_t>(Get64(s, 56));
    state.loss = loss;
  }
  return std::make_pair(Get64(s, 8), state);
}

// Reads both slots; a slot past the end of the file reads as damaged.
Status ReadSlots(int fd, const std::string& path, std::array<Slot, 2>* slots) {
  for (int i = 0; i < 2; ++i) {
    (*slots)[i].fill(0);
    ssize_t n = ::pread(fd, (*slots)[i].data(), kSlotBytes, kSlotOffset[i]);
    if (n < 0) return ErrnoStatus("read", path);
  }
  return Status::OK();
}

// The intact slot with the highest sequence.
std::optional<std::pair<uint64_t, CommitLogState>> Newest(const std::array<Slot, 2>& slots) {
  std::optional<std::pair<uint64_t, CommitLogState>> best;
  for (const Slot& s : slots) {
    auto decoded = Decode(s);
    if (decoded && (!best || decoded->first > best->first)) best = std::move(decoded);
  }
  return best;
}

}  // namespace

Result<std::optional<CommitLogState>> CommitLog::Read(const std::string& dir) {
  const std::string path = dir + "/" + kFileName;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<CommitLogState>();
    return ErrnoStatus("open commit log", path);
  }
  std::array<Slot, 2> slots;
  Status s = ReadSlots(fd, path, &slots);
  ::close(fd);
  TRAINSNAP_RETURN_IF_ERROR(s);
  auto newest = Newest(slots);
  if (!newest) return Status::Corruption("commit log " + path + ": neither slot is intact");
  return std::optional<CommitLogState>(std::move(newest->second));
}

Result<std::unique_ptr<CommitLog>> CommitLog::Open(const std::string& dir, bool sync, const CommitLogState& state) {
  const std::string path = dir + "/" + kFileName;
  bool created = false;
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    created = true;
  }
  if (fd < 0) return ErrnoStatus("open commit log", path);
  std::unique_ptr<CommitLog> log(new CommitLog(fd, path, sync));
  if (!created) {
    std::array<Slot, 2> slots;
    TRAINSNAP_RETURN_IF_ERROR(ReadSlots(fd, path, &slots));
    auto newest = Newest(slots);
    if (newest) log->sequence_ = newest->first;
  }
  // A new file gets both slots, so that either may be torn later.
  if (created) TRAINSNAP_RETURN_IF_ERROR(log->Write(state));
  TRAINSNAP_RETURN_IF_ERROR(log->Write(state));
  if (created && sync) {
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return ErrnoStatus("open directory", dir);
    const int rc = ::fsync(dfd);
    Status st = rc == 0 ? Status::OK() : ErrnoStatus("sync directory", dir);
    ::close(dfd);
    TRAINSNAP_RETURN_IF_ERROR(st);
  }
  return log;
}

CommitLog::~CommitLog() {
  if (fd_ >= 0) ::close(fd_);
}

Status CommitLog::Write(const CommitLogState& state) {
  const uint64_t sequence = sequence_ + 1;
  const Slot slot = Encode(state, sequence);
  const off_t offset = kSlotOffset[sequence % 2];
  ssize_t n = ::pwrite(fd_, slot.data(), slot.size(), offset);
  if (n < 0) return ErrnoStatus("write commit log", path_);
  if (static_cast<size_t>(n) != slot.size()) return Status::IOError("write commit log " + path_ + ": short write");
  if (sync_ && ::fdatasync(fd_) != 0) return ErrnoStatus("sync commit log", path_);
  sequence_ = sequence;
  return Status::OK();
}

}  // namespace trainsnap::internal
