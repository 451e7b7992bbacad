#include "distributed/run_dir.h"

#include <cstdio>
#include <sstream>

namespace trainsnap::internal {

namespace {

// Bumped when the record changes incompatibly; readers refuse newer versions.
constexpr int kGlobalRecordVersion = 1;
constexpr char kMagic[] = "trainsnap-global-record";

bool ParseUint(std::string_view text, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) return false;
    value = value * 10 + digit;
  }
  *out = value;
  return true;
}

std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (start <= line.size()) {
    const size_t space = line.find(' ', start);
    const size_t end = space == std::string_view::npos ? line.size() : space;
    fields.push_back(line.substr(start, end - start));
    if (space == std::string_view::npos) break;
    start = space + 1;
  }
  return fields;
}

}  // namespace

std::string RankStoreName(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank-%05d", rank);
  return name;
}

std::string RankStorePath(const std::string& run_dir, int rank) { return run_dir + "/" + RankStoreName(rank); }

int ParseRankStoreName(std::string_view name) {
  constexpr std::string_view kPrefix = "rank-";
  if (name.size() != kPrefix.size() + 5 || name.substr(0, kPrefix.size()) != kPrefix) return -1;
  int rank = 0;
  for (char c : name.substr(kPrefix.size())) {
    if (c < '0' || c > '9') return -1;
    rank = rank * 10 + (c - '0');
  }
  return rank;
}

std::string GlobalStorePath(const std::string& run_dir) { return run_dir + "/global"; }

std::string EncodeGlobalRecord(const GlobalRecord& record) {
  std::ostringstream out;
  out << kMagic << ' ' << kGlobalRecordVersion << '\n';
  out << "world_size " << record.world_size << '\n';
  out << "model_replicated " << (record.model_replicated ? 1 : 0) << '\n';
  out << "optimizer_replicated " << (record.optimizer_replicated ? 1 : 0) << '\n';
  for (size_t r = 0; r < record.ranks.size(); ++r) {
    const RankFigures& f = record.ranks[r];
    out << "rank " << r << ' ' << f.logical_bytes << ' ' << f.stored_bytes << ' ' << f.new_bytes << '\n';
  }
  return out.str();
}

Result<GlobalRecord> ParseGlobalRecord(std::string_view bytes) {
  GlobalRecord record;
  bool have_world = false, have_model = false, have_optimizer = false;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t nl = bytes.find('\n', pos);
    if (nl == std::string_view::npos) return Status::Corruption("global record: last line not terminated");
    const std::string_view line = bytes.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    const std::vector<std::string_view> f = Fields(line);
    auto bad = [&]() {
      return Status::Corruption("global record: line " + std::to_string(line_no) + " `" + std::string(line) +
                                "` is malformed");
    };
    uint64_t a = 0, b = 0, c = 0, d = 0;
    if (line_no == 1) {
      if (f.size() != 2 || f[0] != kMagic || !ParseUint(f[1], &a)) return bad();
      if (a != kGlobalRecordVersion) {
        return Status::NotSupported("global record version " + std::to_string(a) + " (this build reads " +
                                    std::to_string(kGlobalRecordVersion) + ")");
      }
      continue;
    }
    if (f.size() == 2 && f[0] == "world_size" && ParseUint(f[1], &a) && a > 0 && a <= (1u << 20) && !have_world) {
      record.world_size = static_cast<int>(a);
      have_world = true;
    } else if (f.size() == 2 && f[0] == "model_replicated" && ParseUint(f[1], &a) && a <= 1 && !have_model) {
      record.model_replicated = a == 1;
      have_model = true;
    } else if (f.size() == 2 && f[0] == "optimizer_replicated" && ParseUint(f[1], &a) && a <= 1 &&
               !have_optimizer) {
      record.optimizer_replicated = a == 1;
      have_optimizer = true;
    } else if (f.size() == 5 && f[0] == "rank" && ParseUint(f[1], &a) && a == record.ranks.size() &&
               ParseUint(f[2], &b) && ParseUint(f[3], &c) && ParseUint(f[4], &d)) {
      record.ranks.push_back(RankFigures{b, c, d});
    } else {
      return bad();
    }
  }
  if (line_no == 0) return Status::Corruption("global record is empty");
  if (!have_world || !have_model || !have_optimizer) {
    return Status::Corruption("global record lacks world_size, model_replicated or optimizer_replicated");
  }
  if (record.ranks.size() != static_cast<size_t>(record.world_size)) {
    return Status::Corruption("global record: " + std::to_string(record.ranks.size()) + " rank lines for world size " +
                              std::to_string(record.world_size));
  }
  return record;
}

}  // namespace trainsnap::internal
