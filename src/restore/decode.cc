#include "restore/decode.h"

#include "capture/contract.h"
#include "capture/torch_dtype.h"

namespace trainsnap::internal {

Result<DecodedTensors> DecodeTensors(Store& store, int64_t step, const std::vector<WantedTensor>& wanted) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<TensorRecord> records, store.Tensors(step));
  std::map<TensorKey, const TensorRecord*> by_key;
  for (const TensorRecord& record : records) by_key.emplace(TensorKey(record.param_id, record.role), &record);

  DecodedTensors decoded;
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
    TRAINSNAP_RETURN_IF_ERROR(store.ReadTensor(record, host.data_ptr(), host.nbytes()).WithContext(what));
    decoded.emplace(TensorKey(want.param_id, want.role), std::move(host));
  }
  return decoded;
}

}  // namespace trainsnap::internal
