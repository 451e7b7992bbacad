#include "restore/decode.h"

#include "capture/contract.h"
#include "capture/torch_dtype.h"

namespace trainsnap::internal {

Result<DecodedTensors> DecodeTensors(Store& store, int64_t step, const std::vector<WantedTensor>& wanted) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<TensorRecord> records, store.Tensors(step));
  std::map<TensorKey, const TensorRecord*> by_key;
  for (const TensorRecord& record : records) by_key.emplace(TensorKey(record.param_id, record.role), &record);

  // Check every record and allocate its host tensor first; then read.
  // One read per wanted tensor, into its fresh host tensor (hosts[i]).
  std::vector<TensorRead> reads;
  std::vector<torch::Tensor> hosts;
  reads.reserve(wanted.size());
  hosts.reserve(wanted.size());
  for (const WantedTensor& want : wanted) {
    const std::string what = "tensor `" + want.name + "` role " + want.role;
    auto it = by_key.find(TensorKey(want.param_id, want.role));
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
    torch::Tensor host = torch::empty(record.shape, torch::TensorOptions().dtype(*type));
    if (host.nbytes() != record.bytes) {
      return Status::Corruption(what + ": record says " + std::to_string(record.bytes) + " bytes, shape needs " +
                                std::to_string(host.nbytes()));
    }
    reads.push_back({&record, host.data_ptr(), host.nbytes(), what});
    hosts.push_back(std::move(host));
  }
  TRAINSNAP_RETURN_IF_ERROR(store.ReadTensors(reads));
  DecodedTensors decoded;
  for (size_t i = 0; i < hosts.size(); ++i) {
    decoded.emplace(TensorKey(wanted[i].param_id, wanted[i].role), std::move(hosts[i]));
  }
  return decoded;
}

}  // namespace trainsnap::internal
