#include "restore/decode.h"

#include <functional>
#include <unordered_map>

#include <c10/util/safe_numerics.h>

#include "torch/contract.h"
#include "torch/dtype.h"
#include "torch/slab_chain.h"

namespace trainsnap::internal {

namespace {

// Host tensors under kSmallTensorBytes are cut from shared slabs rather
// than allocated one by one (why: torch/slab_chain.h). One chain of slabs per
// role: the slabs of tensors that apply copies into live ones (parameters)
// die with the restore, while those it installs (optimizer state, replaced
// gradients) hold only slabs of their own role.
class HostSlabs {
 public:
  torch::Tensor Empty(const std::vector<int64_t>& shape, c10::ScalarType type, const std::string& role) {
    // A record's shape is not trusted yet: overflowing or negative sizes take
    // torch::empty's path, whose errors the caller reports.
    uint64_t numel = 0;
    const bool overflow = c10::safe_multiplies_u64(shape, &numel);
    if (overflow || numel == 0 || numel >= kSmallTensorBytes ||
        numel * c10::elementSize(type) >= kSmallTensorBytes) {
      return torch::empty(shape, torch::TensorOptions().dtype(type));
    }
    return slabs_[role].Cut(shape, type, [] {
      return torch::empty({static_cast<int64_t>(kSlabBytes)}, torch::kUInt8);
    });
  }

 private:
  std::map<std::string, SlabChain> slabs_;
};

}  // namespace

Result<DecodedTensors> DecodeTensors(Store& store, int64_t step, const std::vector<WantedTensor>& wanted) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<TensorRecord> records, store.Tensors(step));
  // A hash table sized once, not an ordered map: at 150k string-keyed nodes
  // probed in manifest order (unrelated to key order) every look-up chased
  // about 17 pointers through memory (issue 18: linear scaling).
  std::unordered_map<DecodedKey, const TensorRecord*, DecodedKeyHash> by_key;
  by_key.reserve(records.size());
  for (const TensorRecord& record : records) by_key.emplace(DecodedKey(record.param_id, record.role), &record);

  // Check every record and allocate its host tensor first; then read.
  // One read per wanted tensor, into its fresh host tensor (hosts[i]).
  std::vector<TensorRead> reads;
  std::vector<torch::Tensor> hosts;
  HostSlabs slabs;
  reads.reserve(wanted.size());
  hosts.reserve(wanted.size());
  for (const WantedTensor& want : wanted) {
    std::string what = "tensor `" + want.name + "` role " + want.role;  // moved into its read
    auto it = by_key.find(DecodedKey(want.param_id, want.role));
    if (it == by_key.end()) return Status::Corruption(what + ": in the manifest but not in the snapshot");
    const TensorRecord& record = *it->second;
    if (record.shape != want.shape) {
      return Status::Corruption(what + ": stored shape " + ShapeString(record.shape) + ", manifest says " +
                                ShapeString(want.shape));
    }
    if (want.dtype.has_value() && record.dtype != *want.dtype) {
      return Status::Corruption(what + ": stored dtype " + std::string(DTypeName(record.dtype)) +
                                ", manifest says " + std::string(DTypeName(*want.dtype)));
    }
    Result<c10::ScalarType> type = ToScalarType(record.dtype);
    if (!type.ok()) return type.status().WithContext(what);
    torch::Tensor host = slabs.Empty(record.shape, *type, want.role);
    if (host.nbytes() != record.bytes) {
      return Status::Corruption(what + ": record says " + std::to_string(record.bytes) + " bytes, shape needs " +
                                std::to_string(host.nbytes()));
    }
    reads.push_back({&record, host.data_ptr(), host.nbytes(), std::move(what)});
    hosts.push_back(std::move(host));
  }
  TRAINSNAP_RETURN_IF_ERROR(store.ReadTensors(reads));
  DecodedTensors decoded;
  decoded.reserve(hosts.size());
  for (size_t i = 0; i < hosts.size(); ++i) {
    decoded.emplace(DecodedKey(wanted[i].param_id, wanted[i].role), std::move(hosts[i]));
  }
  return decoded;
}

}  // namespace trainsnap::internal
