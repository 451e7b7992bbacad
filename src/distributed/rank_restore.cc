#include "distributed/rank_restore.h"

#include <cstring>

#define XXH_INLINE_ALL  // header-only: libtrainsnap does not export XXH3
#include <xxhash.h>

#include "distributed/run_dir.h"
#include "store/records.h"
#include "torch/contract.h"
#include "torch/dtype.h"
#include "torch/huge_pages.h"

namespace trainsnap::internal {

namespace {

// Packed tensors: a header naming them, then their bytes, each at an offset
// aligned for any dtype. Native byte order (this build runs on little-endian
// hosts only, like the store's chunk format); both ends are one build.
constexpr uint64_t kPackMagic = 0x3130474843585354ULL;  // "TSXCHG01"
constexpr size_t kPackAlign = 64;

size_t AlignUp(size_t n) { return (n + kPackAlign - 1) / kPackAlign * kPackAlign; }

class HeaderWriter {
 public:
  void U32(uint32_t v) { Append(&v, sizeof(v)); }
  void U64(uint64_t v) { Append(&v, sizeof(v)); }
  void Bytes(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    Append(s.data(), s.size());
  }
  const std::string& bytes() const { return bytes_; }

 private:
  void Append(const void* data, size_t size) { bytes_.append(static_cast<const char*>(data), size); }
  std::string bytes_;
};

class HeaderReader {
 public:
  HeaderReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool U32(uint32_t* v) { return Take(v, sizeof(*v)); }
  bool U64(uint64_t* v) { return Take(v, sizeof(*v)); }
  bool Bytes(std::string* s) {
    uint32_t n = 0;
    if (!U32(&n) || n > size_ - at_) return false;
    s->assign(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return true;
  }

 private:
  bool Take(void* out, size_t n) {
    if (n > size_ - at_) return false;
    std::memcpy(out, data_ + at_, n);
    at_ += n;
    return true;
  }
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

}  // namespace

int HomeRank(int rank, int captured) { return rank < captured ? rank : rank % captured; }

std::vector<int> StoresReadBy(int rank, int ranks, int captured) {
  std::vector<int> stores;
  for (int k = rank; k < captured; k += ranks) stores.push_back(k);
  return stores;
}

Result<ReplicatedTensors> ReplicatedHolders(const proto::TrainingManifest& manifest, int home, bool model_replicated,
                                            bool optimizer_replicated) {
  std::map<TensorKey, int> external;
  for (const proto::ExternalTensor& tensor : manifest.external_tensors()) {
    const int rank = ParseRankStoreName(tensor.source());
    if (rank < 0) {
      return Status::Corruption("tensor ID " + std::to_string(tensor.id()) + " role " + tensor.role() +
                                " is stored in `" + tensor.source() + "`, no rank store");
    }
    external[{tensor.id(), tensor.role()}] = rank;
  }
  ReplicatedTensors out;
  auto add = [&](std::map<int, std::vector<TensorKey>>& into, uint64_t id, std::string role) {
    TensorKey key{id, std::move(role)};
    auto it = external.find(key);
    into[it == external.end() ? home : it->second].push_back(std::move(key));
  };
  if (model_replicated) {
    for (const proto::ContractParam& param : manifest.params()) add(out.model, param.id(), "param");
    for (const proto::ModelTensor& tensor : manifest.model_tensors()) add(out.model, tensor.id(), tensor.role());
  }
  if (optimizer_replicated) {
    for (const proto::OptimizerManifest& optimizer : manifest.optimizers()) {
      for (const proto::ParamOptimizerState& state : optimizer.params()) {
        for (const std::string& role : state.roles())
          add(out.optimizer, state.param_id(), optimizer.role_prefix() + role);
      }
    }
  }
  for (auto* holders : {&out.model, &out.optimizer}) {
    for (auto& [rank, keys] : *holders) std::sort(keys.begin(), keys.end());
  }
  return out;
}

Result<torch::Tensor> PackTensors(int64_t step, const std::vector<std::pair<Store*, std::vector<TensorKey>>>& reads) {
  std::vector<std::vector<TensorRecord>> records(reads.size());
  std::vector<const TensorRecord*> chosen;
  for (size_t s = 0; s < reads.size(); ++s) {
    if (reads[s].second.empty()) continue;
    Store& store = *reads[s].first;
    Result<std::vector<TensorRecord>> all = store.Tensors(step);
    if (!all.ok()) return all.status().WithContext(store.path());
    records[s] = std::move(all).value();
    std::map<TensorKey, const TensorRecord*> by_key;
    for (const TensorRecord& record : records[s]) by_key[{record.param_id, record.role}] = &record;
    for (const TensorKey& key : reads[s].second) {
      auto it = by_key.find(key);
      if (it == by_key.end()) {
        return Status::Corruption(store.path() + ": its snapshot lacks tensor ID " + std::to_string(key.first) +
                                  " role " + key.second + ", which the manifest says it holds");
      }
      chosen.push_back(it->second);
    }
  }
  if (chosen.empty()) return torch::Tensor();
  HeaderWriter header;
  header.U64(kPackMagic);
  header.U64(chosen.size());
  // Offsets relative to the payload, which starts after the aligned header.
  std::vector<size_t> offsets;
  size_t payload = 0;
  for (const TensorRecord* record : chosen) {
    offsets.push_back(payload);
    header.U64(record->param_id);
    header.Bytes(record->role);
    header.U32(static_cast<uint32_t>(record->dtype));
    header.U32(static_cast<uint32_t>(record->shape.size()));
    for (int64_t dim : record->shape) header.U64(static_cast<uint64_t>(dim));
    header.U64(payload);
    header.U64(record->bytes);
    payload = AlignUp(payload + record->bytes);
  }
  const size_t start = AlignUp(header.bytes().size() + sizeof(uint64_t));
  torch::Tensor packed = HugePageBytes(static_cast<int64_t>(start + payload));
  uint8_t* base = packed.data_ptr<uint8_t>();
  const uint64_t header_bytes = header.bytes().size();
  std::memcpy(base, &header_bytes, sizeof(header_bytes));
  std::memcpy(base + sizeof(header_bytes), header.bytes().data(), header.bytes().size());
  size_t next = 0;
  for (size_t s = 0; s < reads.size(); ++s) {
    std::vector<TensorRead> batch;
    for (size_t i = 0; i < reads[s].second.size(); ++i, ++next) {
      const TensorRecord* record = chosen[next];
      batch.push_back({record, base + start + offsets[next], record->bytes,
                       "tensor ID " + std::to_string(record->param_id) + " role " + record->role});
    }
    if (!batch.empty())
      TRAINSNAP_RETURN_IF_ERROR(reads[s].first->ReadTensors(batch).WithContext(reads[s].first->path()));
  }
  return packed;
}

Result<std::map<TensorKey, torch::Tensor>> UnpackTensors(const torch::Tensor& packed) {
  std::map<TensorKey, torch::Tensor> out;
  if (!packed.defined()) return out;
  const auto* base = packed.data_ptr<uint8_t>();
  const size_t size = static_cast<size_t>(packed.numel());
  auto bad = [](const std::string& why) { return Status::Corruption("exchanged tensors: " + why); };
  uint64_t header_bytes = 0;
  if (size < sizeof(header_bytes)) return bad("truncated");
  std::memcpy(&header_bytes, base, sizeof(header_bytes));
  if (header_bytes > size - sizeof(header_bytes)) return bad("truncated header");
  const size_t start = AlignUp(header_bytes + sizeof(uint64_t));
  if (start > size) return bad("truncated");
  HeaderReader in(base + sizeof(header_bytes), header_bytes);
  uint64_t magic = 0, count = 0;
  if (!in.U64(&magic) || magic != kPackMagic || !in.U64(&count)) return bad("bad header");
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t id = 0, offset = 0, bytes = 0;
    uint32_t dtype = 0, dims = 0;
    std::string role;
    if (!in.U64(&id) || !in.Bytes(&role) || !in.U32(&dtype) || !in.U32(&dims) || dims > 64) return bad("bad entry");
    std::vector<int64_t> shape(dims);
    for (int64_t& dim : shape) {
      uint64_t d = 0;
      if (!in.U64(&d)) return bad("bad entry");
      dim = static_cast<int64_t>(d);
    }
    if (!in.U64(&offset) || !in.U64(&bytes) || offset > size - start || bytes > size - start - offset) {
      return bad("entry out of bounds");
    }
    if (!IsValidDType(dtype)) return bad("unknown dtype " + std::to_string(dtype));
    Result<c10::ScalarType> type = ToScalarType(static_cast<DType>(dtype));
    if (!type.ok()) return type.status();
    auto expected = CheckedTensorBytes(dtype, shape);
    if (!expected.ok() || *expected != bytes) return bad("entry size disagrees with its shape");
    torch::Tensor raw = packed.narrow(0, static_cast<int64_t>(start + offset), static_cast<int64_t>(bytes));
    out[{id, role}] = raw.view(*type).view(shape);
  }
  return out;
}

uint64_t DerivedSeed(const std::string& saved_state, int rank) {
  return XXH3_64bits_withSeed(saved_state.data(), saved_state.size(), static_cast<uint64_t>(rank));
}

Status DeriveRng(proto::TrainingManifest* manifest, int rank) {
  for (proto::GeneratorState& state : *manifest->mutable_rng()) {
    at::Generator scratch;
    try {
      scratch = at::globalContext().defaultGenerator(c10::Device(state.device())).clone();
    } catch (const std::exception&) {
      continue;  // a device this process lacks: the restore reports it
    }
    scratch.set_current_seed(DerivedSeed(state.state(), rank));
    at::Tensor bytes = scratch.get_state();
    state.set_state(std::string(static_cast<const char*>(bytes.data_ptr()), bytes.nbytes()));
  }
  return Status::OK();
}

Result<DecodedTensors> RankTensorReader::Read(int64_t step, const proto::TrainingManifest& manifest,
                                              const std::vector<WantedTensor>& wanted) {
  std::map<TensorKey, const std::string*> external;
  for (const proto::ExternalTensor& tensor : manifest.external_tensors()) {
    external[{tensor.id(), tensor.role()}] = &tensor.source();
  }
  DecodedTensors decoded;
  std::vector<WantedTensor> here;
  std::map<std::string, std::vector<WantedTensor>> elsewhere;  // by source
  for (const WantedTensor& want : wanted) {
    TensorKey key{want.param_id, want.role};
    auto exchanged = exchanged_.find(key);
    if (exchanged != exchanged_.end()) {
      const torch::Tensor& tensor = exchanged->second;
      auto what = [&] { return "tensor `" + *want.name + "` role " + want.role; };
      if (tensor.sizes() != want.shape) {
        return Status::Corruption(what() + ": stored shape " + ShapeString(tensor.sizes()) + ", manifest says " +
                                  ShapeString(want.shape));
      }
      if (want.dtype.has_value()) {
        Result<c10::ScalarType> type = ToScalarType(*want.dtype);
        if (!type.ok() || *type != tensor.scalar_type()) {
          return Status::Corruption(what() + ": stored dtype " + std::string(c10::toString(tensor.scalar_type())) +
                                    ", manifest says " + std::string(DTypeName(*want.dtype)));
        }
      }
      decoded.Add(want.param_id, want.role, tensor);
      continue;
    }
    auto it = external.find(key);
    if (it == external.end()) {
      here.push_back(want);
    } else {
      elsewhere[*it->second].push_back(want);
    }
  }
  TRAINSNAP_ASSIGN_OR_RETURN(DecodedTensors own, DecodeTensors(home_, step, here));
  decoded.Append(std::move(own));
  for (const auto& [source, group] : elsewhere) {
    Result<Store*> store = source_(source);
    if (!store.ok()) return store.status().WithContext("source `" + source + "`");
    Result<DecodedTensors> part = DecodeTensors(**store, step, group);
    if (!part.ok()) return part.status().WithContext("source `" + source + "`");
    decoded.Append(std::move(part).value());
  }
  return decoded;
}

}  // namespace trainsnap::internal
