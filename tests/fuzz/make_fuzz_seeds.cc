// Writes the fuzzers' seed corpora from real encoded values: chunks of
// several dtypes and codecs, tensor and snapshot records, keys, and split
// manifests (manifest_codec_fuzzer's input: 2 bytes of split, own, layout).
//   make_fuzz_seeds <chunk dir> <record dir> <manifest dir>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "store/chunk_codec.h"
#include "store/chunk_hash.h"
#include "store/keys.h"
#include "store/records.h"
#include "torch/manifest_codec.h"

using namespace trainsnap;
using namespace trainsnap::internal;

namespace {
void Write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) return 1;
  const std::string chunks = argv[1], records = argv[2], manifests = argv[3];
  std::vector<float> smooth(1024);
  for (size_t i = 0; i < smooth.size(); ++i) smooth[i] = std::sin(0.01f * i);
  std::vector<uint8_t> noise(3000);
  uint32_t x = 12345;
  for (uint8_t& b : noise) b = static_cast<uint8_t>((x = x * 1103515245 + 12345) >> 16);
  int n = 0;
  // Plane-coded chunks (format version 7) and single Zstd frames (version
  // 6), plain and as XOR deltas of the smooth data against a shifted copy.
  std::vector<float> shifted(smooth.size());
  for (size_t i = 0; i < shifted.size(); ++i) shifted[i] = smooth[i] * 1.0001f;
  for (size_t width : {1, 2, 4, 8}) {
    for (bool shuffle : {true, false}) {
      for (bool planes : {true, false}) {
        ChunkEncodeOptions o;
        o.element_size = width;
        o.shuffle = shuffle;
        o.planes = planes;
        o.float16_split = width == 2 && planes;
        std::string out;
        if (EncodeChunk(smooth.data(), smooth.size() * 4, o, &out).ok()) Write(chunks, "smooth" + std::to_string(n++), out);
        if (EncodeChunk(noise.data(), noise.size(), o, &out).ok()) Write(chunks, "noise" + std::to_string(n++), out);
        if (EncodeDeltaChunk(shifted.data(), smooth.data(), smooth.size() * 4, HashChunk(smooth.data(), 4096), 0, o,
                             &out)
                .ok()) {
          Write(chunks, "delta" + std::to_string(n++), out);
        }
      }
    }
  }
  TensorRecord r;
  r.param_id = 7;
  r.role = "param";
  r.dtype = DType::kFloat32;
  r.shape = {32, 32};
  r.bytes = 4096;
  r.chunks = {{HashChunk(smooth.data(), 2048), 2048, 900}, {HashChunk(smooth.data() + 512, 2048), 2048, 950}};
  Write(records, "tensor_record", SerializeTensorRecord(r));
  r.shape = {};
  r.dtype = DType::kFloat64;
  r.bytes = 8;
  r.chunks = {{HashChunk(smooth.data(), 8), 8, 24}};
  Write(records, "scalar_record", SerializeTensorRecord(r));
  SnapshotInfo info;
  info.step = 0x0102030405060708;
  info.tensors = 2;
  info.logical_bytes = 4104;
  Write(records, "snapshot_record", SerializeSnapshotRecord(info, "manifest bytes"));
  Write(records, "step_key", EncodeStepKey(-42));
  Write(records, "tensor_key", EncodeTensorKey(12, 99, "exp_avg"));

  // A manifest with what the per-snapshot part carries: gradient runs,
  // optimizer steps and group options, scheduler, window, RNG, extra state.
  proto::TrainingManifest m;
  m.set_step(5);
  m.add_models("");
  for (int i = 0; i < 6; ++i) {
    proto::ContractParam* p = m.add_params();
    p->set_id(100 + i);
    p->add_names("layer" + std::to_string(i) + ".weight");
    p->add_shape(4);
    p->set_dtype(static_cast<uint32_t>(DType::kFloat32));
    p->set_grad(i % 3 == 0 ? proto::GRAD_STORED : proto::GRAD_ZERO);
  }
  proto::OptimizerManifest* opt = m.add_optimizers();
  opt->set_name("adam");
  opt->set_type("Adam");
  opt->add_groups()->mutable_options()->set_lr(1e-3);
  for (int i = 0; i < 6; ++i) {
    proto::ParamOptimizerState* s = opt->add_params();
    s->set_param_id(100 + i);
    s->set_step(i < 4 ? 7 : 3);
    s->add_roles("exp_avg");
  }
  m.mutable_scheduler()->set_step_count(9);
  m.mutable_accumulation()->set_micro_step(1);
  m.add_extra()->set_name("sampler");
  m.mutable_extra(0)->set_state("position 42");
  auto encoded = EncodeManifest(std::move(m));
  if (!encoded.ok()) return 1;
  std::string input(2, '\0');
  input[0] = static_cast<char>(encoded->own.size() & 0xff);
  input[1] = static_cast<char>(encoded->own.size() >> 8);
  Write(manifests, "manifest", input + encoded->own + encoded->layout);
  return 0;
}
