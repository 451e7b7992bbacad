#include "cli/safetensors_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

namespace trainsnap::cli {

namespace {
Status ErrnoStatus(const std::string& what, int error) {
  std::string message = what + ": " + std::strerror(error);
  return error == ENOSPC ? Status::NoSpace(message) : Status::IOError(message);
}
}  // namespace

Result<std::string> SafetensorsDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return std::string("F32");
    case DType::kFloat64: return std::string("F64");
    case DType::kFloat16: return std::string("F16");
    case DType::kBFloat16: return std::string("BF16");
    case DType::kInt8: return std::string("I8");
    case DType::kUInt8: return std::string("U8");
    case DType::kInt16: return std::string("I16");
    case DType::kInt32: return std::string("I32");
    case DType::kInt64: return std::string("I64");
    case DType::kBool: return std::string("BOOL");
    default: break;
  }
  return Status::NotSupported("dtype " + std::string(DTypeName(dtype)) + " has no safetensors equivalent");
}

Result<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    std::string path, std::vector<SafetensorsEntry> entries, const std::map<std::string, std::string>& metadata) {
  static_assert(sizeof(uint64_t) == 8);
  uint16_t probe = 1;
  uint8_t first_byte;
  std::memcpy(&first_byte, &probe, 1);
  if (first_byte != 1) return Status::NotSupported("safetensors export needs a little-endian host");

  std::stable_sort(entries.begin(), entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    size_t sa = DTypeSize(a.dtype), sb = DTypeSize(b.dtype);
    return sa != sb ? sa > sb : a.name < b.name;
  });
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    if (e.name == "__metadata__" || !seen.insert(e.name).second) {
      return Status::InvalidArgument("safetensors: duplicate or reserved tensor name `" + e.name + "`");
    }
    auto dtype = SafetensorsDType(e.dtype);
    if (!dtype.ok()) return dtype.status().WithContext("tensor `" + e.name + "`");
    header[e.name] = {{"dtype", *dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes}}};
    offset += e.bytes;
  }
  std::string text = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // Pad with spaces (allowed by the format) so the data starts 8-byte aligned.
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');

  std::string tmp = path + ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (file == nullptr) return ErrnoStatus("create `" + tmp + "`", errno);
  std::unique_ptr<SafetensorsWriter> writer(new SafetensorsWriter(std::move(path), std::move(entries), file));
  uint8_t length[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(n >> (8 * i));  // little-endian
  if (std::fwrite(length, 1, 8, file) != 8 || std::fwrite(text.data(), 1, text.size(), file) != text.size()) {
    return ErrnoStatus("write `" + tmp + "`", errno);
  }
  return writer;
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<SafetensorsEntry> entries, std::FILE* file)
    : path_(std::move(path)), tmp_path_(path_ + ".tmp"), entries_(std::move(entries)), file_(file) {}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_ != nullptr) std::fclose(file_);
  if (!finished_) ::unlink(tmp_path_.c_str());
}

Status SafetensorsWriter::Append(const void* data, size_t bytes) {
  if (next_ >= entries_.size()) return Status::InvalidArgument("safetensors: more tensors than declared");
  const SafetensorsEntry& e = entries_[next_];
  if (bytes != e.bytes) {
    return Status::InvalidArgument("safetensors: tensor `" + e.name + "` has " + std::to_string(bytes) +
                                   " bytes, header says " + std::to_string(e.bytes));
  }
  if (bytes > 0 && std::fwrite(data, 1, bytes, file_) != bytes) return ErrnoStatus("write `" + tmp_path_ + "`", errno);
  ++next_;
  return Status::OK();
}

Status SafetensorsWriter::Finish() {
  if (next_ != entries_.size()) {
    return Status::InvalidArgument("safetensors: " + std::to_string(entries_.size() - next_) + " tensors not written");
  }
  if (std::fflush(file_) != 0 || ::fsync(fileno(file_)) != 0) return ErrnoStatus("flush `" + tmp_path_ + "`", errno);
  int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) return ErrnoStatus("close `" + tmp_path_ + "`", errno);
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) return ErrnoStatus("rename to `" + path_ + "`", errno);
  finished_ = true;
  return Status::OK();
}

}  // namespace trainsnap::cli
