#include "store/keys.h"

#include <cstring>

namespace trainsnap::internal {
namespace {

constexpr uint64_t kSignBit = uint64_t{1} << 63;

void PutU64BE(std::string* out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>((v >> shift) & 0xff));
}

uint64_t GetU64BE(std::string_view in) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(in[i]);
  return v;
}

}  // namespace

std::string EncodeStepKey(int64_t step) {
  std::string key;
  key.reserve(kStepKeyBytes);
  PutU64BE(&key, static_cast<uint64_t>(step) ^ kSignBit);
  return key;
}

Result<int64_t> DecodeStepKey(std::string_view key) {
  if (key.size() != kStepKeyBytes) {
    return Status::Corruption("snapshot key has " + std::to_string(key.size()) + " bytes, expected 8");
  }
  return static_cast<int64_t>(GetU64BE(key) ^ kSignBit);
}

std::string TensorKeyPrefix(int64_t step) { return EncodeStepKey(step); }

std::string EncodeTensorKey(int64_t step, uint64_t param_id, std::string_view role) {
  std::string key = EncodeStepKey(step);
  key.reserve(16 + role.size());
  PutU64BE(&key, param_id);
  key.append(role);
  return key;
}

Result<TensorKey> DecodeTensorKey(std::string_view key) {
  if (key.size() < 16) {
    return Status::Corruption("tensor key has " + std::to_string(key.size()) + " bytes, expected at least 16");
  }
  TensorKey out;
  TRAINSNAP_ASSIGN_OR_RETURN(out.step, DecodeStepKey(key.substr(0, 8)));
  out.param_id = GetU64BE(key.substr(8, 8));
  out.role = std::string(key.substr(16));
  return out;
}

std::string EncodeChunkKey(const ChunkHash& hash) {
  return std::string(reinterpret_cast<const char*>(hash.bytes.data()), hash.bytes.size());
}

Result<ChunkHash> DecodeChunkKey(std::string_view key) {
  if (key.size() != kChunkKeyBytes) {
    return Status::Corruption("chunk key has " + std::to_string(key.size()) + " bytes, expected 16");
  }
  ChunkHash hash;
  std::memcpy(hash.bytes.data(), key.data(), kChunkKeyBytes);
  return hash;
}

std::string ParamIdHex(uint64_t param_id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out = "0x";
  for (int shift = 60; shift >= 0; shift -= 4) out += kDigits[(param_id >> shift) & 0xF];
  return out;
}

std::string PrefixUpperBound(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last != 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return prefix;
}

}  // namespace trainsnap::internal
