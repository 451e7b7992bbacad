#include "cli/store_access.h"

#include <filesystem>
#include <system_error>

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

}  // namespace

Result<std::unique_ptr<Store>> OpenForReading(const std::string& path) {
  TRAINSNAP_RETURN_IF_ERROR(CheckExists(path));
  return Store::OpenReadOnly(path);  // its errors name the path already
}

Result<std::unique_ptr<Store>> OpenForWriting(const std::string& path) {
  TRAINSNAP_RETURN_IF_ERROR(CheckExists(path));
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
