#include "restore/decode.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include <c10/util/safe_numerics.h>

#include "common/role_numbers.h"
#include "torch/contract.h"
#include "torch/dtype.h"
#include "torch/huge_pages.h"
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
      torch::Tensor host = torch::empty(shape, torch::TensorOptions().dtype(type));
      AdviseHugePages(host);  // before the decoder writes it: fewer page faults
      return host;
    }
    return slabs_[role].Cut(shape, type, [] {
      return torch::empty({static_cast<int64_t>(kSlabBytes)}, torch::kUInt8);
    });
  }

 private:
  std::map<std::string, SlabChain> slabs_;
};

// (param_id, role) with the role as a small number, for sorting and joining.
struct JoinKey {
  uint64_t param_id = 0;
  uint32_t role = 0;
  uint32_t index = 0;  // into the records or the wanted tensors
  bool operator<(const JoinKey& o) const { return param_id != o.param_id ? param_id < o.param_id : role < o.role; }
  bool SameKey(const JoinKey& o) const { return param_id == o.param_id && role == o.role; }
};

// For each wanted tensor, its record or null. A join of the two lists
// sorted by key: a hash table of the records cost a node and a string per
// record, and at 150,000 records grew faster than their count.
std::vector<const TensorRecord*> FindRecords(const std::vector<TensorRecord>& records,
                                             const std::vector<WantedTensor>& wanted) {
  RoleNumbers roles;
  std::vector<JoinKey> have, want;
  have.reserve(records.size());
  want.reserve(wanted.size());
  for (size_t i = 0; i < records.size(); ++i) {
    have.push_back({records[i].param_id, roles.Of(records[i].role), static_cast<uint32_t>(i)});
  }
  for (size_t i = 0; i < wanted.size(); ++i) {
    want.push_back({wanted[i].param_id, roles.Of(wanted[i].role), static_cast<uint32_t>(i)});
  }
  std::sort(have.begin(), have.end());
  std::sort(want.begin(), want.end());
  std::vector<const TensorRecord*> found(wanted.size(), nullptr);
  size_t h = 0;
  for (const JoinKey& w : want) {
    while (h < have.size() && have[h] < w) ++h;
    if (h < have.size() && have[h].SameKey(w)) found[w.index] = &records[have[h].index];
  }
  return found;
}

std::string What(const WantedTensor& want) { return "tensor `" + *want.name + "` role " + want.role; }

// The error of the first of `reads` that fails when read on its own, named
// after its wanted tensor; `failed` (ReadTensors' own error) when none does
// (a failure that did not recur).
Status NameFailedRead(Store& store, std::vector<TensorRead> reads, const std::vector<WantedTensor>& wanted,
                      Status failed) {
  for (size_t i = 0; i < reads.size(); ++i) {
    reads[i].name = What(wanted[i]);
    Status one = store.ReadTensors({reads[i]});
    if (!one.ok()) return one;
  }
  return failed;
}

}  // namespace

Result<DecodedTensors> DecodeTensors(Store& store, int64_t step, const std::vector<WantedTensor>& wanted) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<TensorRecord> records, store.Tensors(step));
  if (records.size() > UINT32_MAX || wanted.size() > UINT32_MAX) {
    return Status::NotSupported("more than 2^32 tensors in one snapshot");
  }
  const std::vector<const TensorRecord*> found = FindRecords(records, wanted);

  // Check every record and allocate its host tensor first; then read.
  // One read per wanted tensor, into its fresh host tensor (hosts[i]).
  std::vector<TensorRead> reads;
  std::vector<torch::Tensor> hosts;
  HostSlabs slabs;
  reads.reserve(wanted.size());
  hosts.reserve(wanted.size());
  for (size_t i = 0; i < wanted.size(); ++i) {
    const WantedTensor& want = wanted[i];
    auto what = [&want] { return What(want); };
    if (found[i] == nullptr) return Status::Corruption(what() + ": in the manifest but not in the snapshot");
    const TensorRecord& record = *found[i];
    if (want.shape != c10::IntArrayRef(record.shape)) {
      return Status::Corruption(what() + ": stored shape " + ShapeString(record.shape) + ", manifest says " +
                                ShapeString(want.shape));
    }
    if (want.dtype.has_value() && record.dtype != *want.dtype) {
      return Status::Corruption(what() + ": stored dtype " + std::string(DTypeName(record.dtype)) +
                                ", manifest says " + std::string(DTypeName(*want.dtype)));
    }
    Result<c10::ScalarType> type = ToScalarType(record.dtype);
    if (!type.ok()) return type.status().WithContext(what());
    torch::Tensor host = slabs.Empty(record.shape, *type, want.role);
    if (host.nbytes() != record.bytes) {
      return Status::Corruption(what() + ": record says " + std::to_string(record.bytes) + " bytes, shape needs " +
                                std::to_string(host.nbytes()));
    }
    reads.push_back({&record, host.data_ptr(), host.nbytes(), std::string()});
    hosts.push_back(std::move(host));
  }
  Status read = store.ReadTensors(reads);
  if (!read.ok()) return NameFailedRead(store, std::move(reads), wanted, std::move(read));
  DecodedTensors decoded;
  decoded.Reserve(hosts.size());
  for (size_t i = 0; i < hosts.size(); ++i) decoded.Add(wanted[i].param_id, wanted[i].role, std::move(hosts[i]));
  return decoded;
}

}  // namespace trainsnap::internal
