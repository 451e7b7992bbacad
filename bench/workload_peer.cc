#include "workload_peer.h"

#include <chrono>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include <zstd.h>

namespace trainsnap::bench {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// torch archives are TorchScript modules: attribute names may not contain '.'.
std::string ArchiveKey(const std::string& name) {
  std::string key;
  for (char c : name) {
    if (c == '.') key += "__"; else key += c;
  }
  return key;
}

}  // namespace

Result<PeerSave> SaveTorchPeer(Workload& workload, bool full, const std::string& path, int zstd_level) {
  PeerSave out;
  try {
    auto start = std::chrono::steady_clock::now();
    torch::serialize::OutputArchive archive;
    torch::serialize::OutputArchive model_archive;
    if (full) {
      workload.model().save(model_archive);
    } else {
      for (const auto& item : workload.model().named_parameters()) {
        if (item.value().requires_grad()) model_archive.write(ArchiveKey(item.key()), item.value());
      }
    }
    archive.write("model", model_archive);
    torch::serialize::OutputArchive optimizer_archive;
    workload.optimizer().save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
    archive.save_to(path);
    out.save_s = Seconds(start);
  } catch (const std::exception& e) {
    return Status::IOError("torch::save to " + path + ": " + e.what());
  }

  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return Status::IOError("read back " + path);
  out.file_bytes = bytes.size();
  if (zstd_level > 0) {
    auto start = std::chrono::steady_clock::now();
    std::vector<char> dst(ZSTD_compressBound(bytes.size()));
    size_t n = ZSTD_compress(dst.data(), dst.size(), bytes.data(), bytes.size(), zstd_level);
    if (ZSTD_isError(n)) return Status::Aborted(std::string("ZSTD_compress: ") + ZSTD_getErrorName(n));
    out.zstd_s = Seconds(start);
    out.zstd_bytes = n;
  }
  return out;
}

Status LoadTorchPeer(Workload& workload, bool full, const std::string& path) {
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    if (full) {
      workload.model().load(model_archive);
    } else {
      for (auto& item : workload.model().named_parameters()) {
        if (item.value().requires_grad()) model_archive.read(ArchiveKey(item.key()), item.value());
      }
    }
    torch::serialize::InputArchive optimizer_archive;
    archive.read("optimizer", optimizer_archive);
    workload.optimizer().load(optimizer_archive);
  } catch (const std::exception& e) {
    return Status::IOError("torch::load from " + path + ": " + e.what());
  }
  return Status::OK();
}

}  // namespace trainsnap::bench
