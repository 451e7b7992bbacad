#include "cli/safetensors_writer.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

namespace trainsnap::cli {

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

  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> file, OutputFile::Create(path));
  uint8_t length[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(n >> (8 * i));  // little-endian
  TRAINSNAP_RETURN_IF_ERROR(file->Write(length, 8));
  TRAINSNAP_RETURN_IF_ERROR(file->Write(text.data(), text.size()));
  return std::unique_ptr<SafetensorsWriter>(new SafetensorsWriter(std::move(entries), std::move(file)));
}

SafetensorsWriter::SafetensorsWriter(std::vector<SafetensorsEntry> entries, std::unique_ptr<OutputFile> file)
    : entries_(std::move(entries)), file_(std::move(file)) {}

SafetensorsWriter::~SafetensorsWriter() = default;

Status SafetensorsWriter::Append(const void* data, size_t bytes) {
  if (next_ >= entries_.size()) return Status::InvalidArgument("safetensors: more tensors than declared");
  const SafetensorsEntry& e = entries_[next_];
  if (bytes != e.bytes) {
    return Status::InvalidArgument("safetensors: tensor `" + e.name + "` has " + std::to_string(bytes) +
                                   " bytes, header says " + std::to_string(e.bytes));
  }
  TRAINSNAP_RETURN_IF_ERROR(file_->Write(data, bytes));
  ++next_;
  return Status::OK();
}

Status SafetensorsWriter::Finish() {
  if (next_ != entries_.size()) {
    return Status::InvalidArgument("safetensors: " + std::to_string(entries_.size() - next_) + " tensors not written");
  }
  return file_->Commit();
}

}  // namespace trainsnap::cli
