// libFuzzer target: the checkpointer's manifest codec (src/torch/manifest_codec.h,
// manifest format 2) on arbitrary bytes. The input is a snapshot's own part
// and a layout: its first two bytes (little endian, modulo the rest's size)
// say where the own part ends. A manifest that decodes must encode again, and
// decode from its new parts to the same message.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "torch/manifest_codec.h"
#include "torch/manifest_format.h"

using namespace trainsnap;
using namespace trainsnap::internal;

namespace {
std::string Deterministic(const google::protobuf::MessageLite& m) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  if (!m.SerializeToCodedStream(&coded)) std::abort();
  return out;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  const size_t split = rest.empty() ? 0 : (size_t{data[0]} | size_t{data[1]} << 8) % (rest.size() + 1);
  Result<proto::TrainingManifest> decoded = DecodeManifest(rest.substr(0, split), rest.substr(split));
  if (!decoded.ok()) {
    const StatusCode code = decoded.status().code();
    if (code != StatusCode::kCorruption && code != StatusCode::kNotSupported) std::abort();
    return 0;
  }
  if (decoded->format_version() != kManifestFormatVersion) std::abort();
  const std::string first = Deterministic(*decoded);
  proto::TrainingManifest copy = *decoded;
  Result<EncodedManifest> encoded = EncodeManifest(std::move(copy));
  if (!encoded.ok()) std::abort();
  Result<proto::TrainingManifest> again = DecodeManifest(encoded->own, encoded->layout);
  if (!again.ok() || Deterministic(*again) != first) std::abort();
  return 0;
}
