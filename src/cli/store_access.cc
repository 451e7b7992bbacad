#include "cli/store_access.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace trainsnap::cli {

namespace {

// The library's own NotFound for a missing path may read like a RocksDB
// detail; a missing directory is the most common typo, so say it plainly.
Status CheckExists(const std::string& path) {
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  // Not "does not exist" when the path cannot even be looked at.
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return Status::IOError("store `" + path + "`: " + ec.message());
  }
  if (!exists) {
    return Status::NotFound("store `" + path + "` does not exist");
  }
  if (!std::filesystem::is_directory(path, ec)) {
    return Status::NotFound("`" + path + "` is not a trainsnap store (not a directory)");
  }
  return Status::OK();
}

// A directory that holds run-directory parts (global/, rank-NNNNN/) but is
// not a whole run directory (the command would have taken it as one) and
// not a store: say which part is missing, not "no database".
Status CheckNotPartOfARun(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(fs::path(path) / "CURRENT", ec)) return Status::OK();
  bool global = false;
  std::vector<std::string> ranks;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!it->is_directory(ec)) continue;
    if (name == "global") global = true;
    if (name.size() == 10 && name.rfind("rank-", 0) == 0 &&
        name.find_first_not_of("0123456789", 5) == std::string::npos) {
      ranks.push_back(name);
    }
  }
  if (!global && ranks.empty()) return Status::OK();
  std::sort(ranks.begin(), ranks.end());
  std::string found = global ? "global/" : "";
  for (const std::string& r : ranks) found += (found.empty() ? "" : ", ") + r + "/";
  std::string missing;
  if (!global) missing = "global/";
  if (ranks.empty() || ranks.front() != "rank-00000") {
    missing += std::string(missing.empty() ? "" : " and ") + "rank-00000/";
  }
  const std::string one = (fs::path(path) / (ranks.empty() ? std::string("global") : ranks.front())).string();
  return Status::NotFound("`" + path + "` is a run directory of a multi-rank run (docs/distributed.md) whose " +
                          missing + " is missing (found " + found + "): restore it from a copy, or name one store " +
                          "inside it (`" + one + "`) to inspect that store alone");
}

}  // namespace

Result<std::unique_ptr<Store>> OpenForReading(const std::string& path) {
  TRAINSNAP_RETURN_IF_ERROR(CheckExists(path));
  TRAINSNAP_RETURN_IF_ERROR(CheckNotPartOfARun(path));
  return Store::OpenReadOnly(path);  // its errors name the path already
}

Result<std::unique_ptr<Store>> OpenForWriting(const std::string& path) {
  TRAINSNAP_RETURN_IF_ERROR(CheckExists(path));
  TRAINSNAP_RETURN_IF_ERROR(CheckNotPartOfARun(path));
  StoreOptions options;
  options.create_if_missing = false;
  auto store = Store::Open(path, options);
  if (!store.ok()) {
    if (store.status().code() == StatusCode::kBusy) {
      return Status::Busy("store `" + path +
                          "` is held by another process for writing (a training run?); "
                          "stop it first: " + store.status().message());
    }
    return store.status();
  }
  return store;
}

Result<SnapshotInfo> RequireStep(Store& store, int64_t step) {
  auto info = store.Info(step);
  if (info.ok()) return info;
  if (info.status().code() != StatusCode::kNotFound) {
    return info.status().WithContext("step " + std::to_string(step));
  }
  std::string hint;
  auto latest = store.Latest();
  if (latest.ok()) {
    hint = latest->has_value() ? " (latest step: " + std::to_string(**latest) + ")" : " (the store is empty)";
  }
  return Status::NotFound("step " + std::to_string(step) + " not found in store `" + store.path() + "`" + hint);
}

}  // namespace trainsnap::cli
