// export: the safetensors file is read back by an independent Python reader
// (json + numpy), the torch archive by torch::load; both compared bitwise.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cli/torch_archive_writer.h"
#include "cli_fixture.h"
#include "manifest.pb.h"

namespace trainsnap::cli_test {
namespace {

struct Expected {
  std::string name;  // in the exported file
  TensorSpec spec;
};

std::string SafetensorsDType(DType dtype) {
  static const std::map<DType, std::string> kNames = {
      {DType::kFloat32, "F32"}, {DType::kBFloat16, "BF16"}, {DType::kFloat16, "F16"}, {DType::kFloat64, "F64"},
      {DType::kInt64, "I64"},   {DType::kInt32, "I32"},     {DType::kInt16, "I16"},   {DType::kInt8, "I8"},
      {DType::kUInt8, "U8"},    {DType::kBool, "BOOL"}};
  return kNames.at(dtype);
}

std::string TorchDTypeName(DType dtype) {
  static const std::map<DType, std::string> kNames = {
      {DType::kFloat32, "torch.float32"},     {DType::kBFloat16, "torch.bfloat16"},
      {DType::kFloat16, "torch.float16"},     {DType::kFloat64, "torch.float64"},
      {DType::kInt64, "torch.int64"},         {DType::kInt32, "torch.int32"},
      {DType::kInt16, "torch.int16"},         {DType::kInt8, "torch.int8"},
      {DType::kUInt8, "torch.uint8"},         {DType::kBool, "torch.bool"},
      {DType::kComplex64, "torch.complex64"}, {DType::kComplex128, "torch.complex128"}};
  return kNames.at(dtype);
}

// Writes the raw bytes and expected_torch.json for check_torch_export.py.
std::string WriteTorchExpected(const std::string& dir, const std::vector<Expected>& tensors) {
  nlohmann::json doc = nlohmann::json::object();
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::string file = "torch_expected_" + std::to_string(i) + ".bin";
    std::ofstream out(dir + "/" + file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(tensors[i].spec.data.data()),
              static_cast<std::streamsize>(tensors[i].spec.data.size()));
    doc[tensors[i].name] = {
        {"dtype", TorchDTypeName(tensors[i].spec.dtype)}, {"shape", tensors[i].spec.shape}, {"file", file}};
  }
  std::ofstream(dir + "/expected_torch.json") << doc.dump();
  return dir + "/expected_torch.json";
}

class ExportCommandTest : public CliTest {
 protected:
  void SetUp() override {
    const std::vector<std::pair<DType, std::vector<int64_t>>> kinds = {
        {DType::kFloat32, {33, 70}},  {DType::kBFloat16, {5, 7}}, {DType::kFloat16, {9}},  {DType::kFloat64, {3, 3}},
        {DType::kInt64, {2, 2, 2}},   {DType::kInt32, {11}},      {DType::kInt16, {13}},   {DType::kInt8, {17}},
        {DType::kUInt8, {19}},        {DType::kBool, {23}},       {DType::kFloat32, {}},  // a scalar
        {DType::kFloat32, {0, 4}},  // empty
    };
    proto::TrainingManifest m;
    m.set_format_version(1);
    std::vector<TensorSpec> specs;
    for (size_t i = 0; i < kinds.size(); ++i) {
      const auto& [dtype, shape] = kinds[i];
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      uint64_t id = 0x100 + i;
      std::string name = "layers." + std::to_string(i) + ".weight";
      if (i != 3) {  // one parameter without a contract entry: exported under its hex ID
        auto* p = m.add_params();
        p->set_id(id);
        p->add_names(name);
      } else {
        name = "0x0000000000000103";
      }
      TensorSpec spec{id, "param", dtype, shape, RandomBytes(dtype, static_cast<size_t>(numel), 10 + i)};
      expected_.push_back({name, spec});
      specs.push_back(spec);
      if (i == 0) {
        TensorSpec grad{id, "grad", dtype, shape, RandomBytes(dtype, static_cast<size_t>(numel), 99)};
        TensorSpec avg{id, "exp_avg", dtype, shape, RandomBytes(dtype, static_cast<size_t>(numel), 98)};
        expected_.push_back({name + ":grad", grad});
        expected_.push_back({name + ":exp_avg", avg});
        specs.push_back(grad);
        specs.push_back(avg);
      }
    }
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    auto info = WriteSnapshot(*store, 42, specs, m.SerializeAsString());
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    ASSERT_TRUE(WriteSnapshot(*store, 43, {{0x1, "param", DType::kComplex64, {4}, RandomBytes(DType::kComplex64, 4, 7)}})
                    .ok());
  }

  // Writes the raw bytes and expected.json for the Python reader.
  std::string WriteExpected(const std::vector<Expected>& tensors) {
    nlohmann::json doc = nlohmann::json::object();
    for (size_t i = 0; i < tensors.size(); ++i) {
      std::string file = "expected_" + std::to_string(i) + ".bin";
      std::ofstream out(Path(file), std::ios::binary);
      out.write(reinterpret_cast<const char*>(tensors[i].spec.data.data()),
                static_cast<std::streamsize>(tensors[i].spec.data.size()));
      doc[tensors[i].name] = {{"dtype", SafetensorsDType(tensors[i].spec.dtype)},
                              {"shape", tensors[i].spec.shape},
                              {"file", file}};
    }
    std::ofstream(Path("expected.json")) << doc.dump();
    return Path("expected.json");
  }

  std::vector<Expected> expected_;
};

TEST_F(ExportCommandTest, SafetensorsReadsBackBitwiseWithAnIndependentReader) {
  const std::string out = Path("all.safetensors");
  CliRun run = RunCli({"export", StorePath(), "42", "--format", "safetensors", "--out", out, "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(run.err.empty()) << run.err;
  nlohmann::json doc = run.Json();
  EXPECT_EQ(doc["schema"], "trainsnap.export/1");
  EXPECT_EQ(doc["tensors"].size(), expected_.size());
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
  CliRun reader = RunProgram(TRAINSNAP_CLI_TEST_PYTHON, {TRAINSNAP_SAFETENSORS_READER, out, WriteExpected(expected_), "42"});
  EXPECT_EQ(reader.exit_code, 0) << reader.out << reader.err;
  EXPECT_EQ(reader.out, "OK " + std::to_string(expected_.size()) + " tensors\n") << reader.err;
}

TEST_F(ExportCommandTest, RoleFilterSelectsTensors) {
  const std::string out = Path("grads.safetensors");
  CliRun run = RunCli({"export", StorePath(), "42", "--format", "safetensors", "--out", out, "--role", "grad",
                       "--role", "exp_avg"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("exported 2 tensors"), std::string::npos) << run.out;
  std::vector<Expected> wanted;
  for (const Expected& e : expected_) {
    if (e.spec.role != "param") wanted.push_back(e);
  }
  ASSERT_EQ(wanted.size(), 2u);
  CliRun reader = RunProgram(TRAINSNAP_CLI_TEST_PYTHON, {TRAINSNAP_SAFETENSORS_READER, out, WriteExpected(wanted), "42"});
  EXPECT_EQ(reader.exit_code, 0) << reader.out << reader.err;

  CliRun missing = RunCli({"export", StorePath(), "42", "--format", "torch", "--out", Path("x.pt"), "--role", "momentum"});
  EXPECT_EQ(missing.exit_code, 4) << missing.err;
  EXPECT_NE(missing.err.find("no tensor has role `momentum` (roles: exp_avg, grad, param)"), std::string::npos)
      << missing.err;
}

// The torch export is a plain dict {name: tensor} (torch.save's layout):
// what Python's torch.load returns, read here by LibTorch's pickle_load.
std::map<std::string, torch::Tensor> LoadTorchDict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::map<std::string, torch::Tensor> out;
  c10::IValue value = torch::pickle_load(bytes);
  EXPECT_TRUE(value.isGenericDict()) << value.tagKind();
  if (!value.isGenericDict()) return out;
  for (const auto& entry : value.toGenericDict()) {
    EXPECT_TRUE(entry.value().isTensor()) << entry.key().toStringRef();
    out[entry.key().toStringRef()] = entry.value().toTensor();
  }
  return out;
}

TEST_F(ExportCommandTest, TorchFileIsADictOfTensors) {
  const std::string out = Path("all.pt");
  CliRun run = RunCli({"export", StorePath(), "42", "--format", "torch", "--out", out});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::map<std::string, torch::Tensor> by_name = LoadTorchDict(out);
  ASSERT_EQ(by_name.size(), expected_.size());
  for (const Expected& e : expected_) {
    ASSERT_EQ(by_name.count(e.name), 1u) << e.name;
    const torch::Tensor& t = by_name[e.name];
    EXPECT_EQ(t.sizes().vec(), e.spec.shape) << e.name;
    EXPECT_EQ(t.element_size(), static_cast<int64_t>(DTypeSize(e.spec.dtype))) << e.name;
    ASSERT_EQ(static_cast<size_t>(t.numel() * t.element_size()), e.spec.data.size()) << e.name;
    EXPECT_TRUE(t.is_contiguous());
    if (!e.spec.data.empty()) {
      EXPECT_EQ(std::memcmp(t.data_ptr(), e.spec.data.data(), e.spec.data.size()), 0) << e.name;
    }
  }
  EXPECT_EQ(by_name["layers.1.weight"].scalar_type(), torch::kBFloat16);
  EXPECT_EQ(by_name["layers.9.weight"].scalar_type(), torch::kBool);
}

TEST_F(ExportCommandTest, ComplexHasNoSafetensorsTypeButExportsToTorch) {
  CliRun run = RunCli({"export", StorePath(), "43", "--format", "safetensors", "--out", Path("c.safetensors")});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.err.find("complex64 has no safetensors equivalent"), std::string::npos) << run.err;
  EXPECT_FALSE(std::filesystem::exists(Path("c.safetensors")));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_.path()), std::filesystem::directory_iterator()),
            1);  // the store only: no temporary file left behind
  CliRun torch_run = RunCli({"export", StorePath(), "43", "--format", "torch", "--out", Path("c.pt")});
  ASSERT_EQ(torch_run.exit_code, 0) << torch_run.err;
  std::map<std::string, torch::Tensor> tensors = LoadTorchDict(Path("c.pt"));
  ASSERT_EQ(tensors.size(), 1u);
  EXPECT_EQ(tensors.begin()->first, "0x0000000000000001");
  EXPECT_EQ(tensors.begin()->second.scalar_type(), torch::kComplexFloat);
}

TEST_F(ExportCommandTest, WorksWhileAWriterHoldsTheStore) {
  auto writer = OpenStore();
  ASSERT_NE(writer, nullptr);
  CliRun run = RunCli({"export", StorePath(), "42", "--format", "safetensors", "--out", Path("w.safetensors")});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  CliRun reader = RunProgram(TRAINSNAP_CLI_TEST_PYTHON,
                             {TRAINSNAP_SAFETENSORS_READER, Path("w.safetensors"), WriteExpected(expected_), "42"});
  EXPECT_EQ(reader.exit_code, 0) << reader.out << reader.err;
}

// Python's torch.load reads the file with and without weights_only=True,
// every tensor bitwise (check_torch_export.py also checks the zip layout).
TEST_F(ExportCommandTest, TorchFileLoadsBitwiseInPythonWithAndWithoutWeightsOnly) {
  const std::string out = Path("py.pt");
  CliRun run = RunCli({"export", StorePath(), "42", "--format", "torch", "--out", out});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  CliRun checker = RunProgram(TRAINSNAP_CLI_TEST_PYTHON,
                              {TRAINSNAP_TORCH_EXPORT_CHECKER, out, WriteTorchExpected(dir_.path(), expected_)});
  EXPECT_EQ(checker.exit_code, 0) << checker.out << checker.err;
  EXPECT_EQ(checker.out, "OK " + std::to_string(expected_.size()) + " tensors\n") << checker.err;
}

// Every dtype the store has (complex128, special float16 values), 0-d and
// empty tensors of several dtypes, and non-ASCII names, through both loaders.
TEST_F(ExportCommandTest, TorchFileKeepsEveryDTypeScalarsEmptyTensorsAndNonAsciiNames) {
  auto half = [](std::vector<uint16_t> bits) {
    std::vector<uint8_t> out(bits.size() * 2);
    std::memcpy(out.data(), bits.data(), out.size());
    return out;
  };
  const std::vector<std::pair<std::string, TensorSpec>> tensors = {
      {"ß.gewicht", {0x201, "param", DType::kComplex128, {2, 3}, RandomBytes(DType::kComplex128, 6, 1)}},
      {"层.weight", {0x202, "param", DType::kComplex64, {5}, RandomBytes(DType::kComplex64, 5, 2)}},
      // +0, -0, smallest subnormal, largest subnormal, 1, max, inf, -inf, NaN, -NaN
      {"half.special",
       {0x203, "param", DType::kFloat16, {10},
        half({0x0000, 0x8000, 0x0001, 0x03ff, 0x3c00, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0xfe01})}},
      {"bf16.special", {0x204, "param", DType::kBFloat16, {4}, half({0x0001, 0x7f80, 0xffc0, 0x4049})}},
      {"scalar.bool", {0x205, "buffer", DType::kBool, {}, {1}}},
      {"scalar.int64", {0x206, "buffer", DType::kInt64, {}, RandomBytes(DType::kInt64, 1, 3)}},
      {"scalar.c128", {0x207, "buffer", DType::kComplex128, {}, RandomBytes(DType::kComplex128, 1, 4)}},
      {"empty.int8", {0x208, "param", DType::kInt8, {3, 0}, {}}},
      {"empty.f16", {0x209, "param", DType::kFloat16, {0}, {}}},
      {"emoji😀.bias", {0x20a, "param", DType::kUInt8, {1, 1, 2}, {0, 255}}},
  };
  proto::TrainingManifest m;
  m.set_format_version(1);
  std::vector<TensorSpec> specs;
  std::vector<Expected> expected;
  for (const auto& [name, spec] : tensors) {
    auto* p = m.add_params();
    p->set_id(spec.param_id);
    p->add_names(name);
    specs.push_back(spec);
    expected.push_back({name, spec});
  }
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    auto info = WriteSnapshot(*store, 44, specs, m.SerializeAsString());
    ASSERT_TRUE(info.ok()) << info.status().ToString();
  }
  const std::string out = Path("special.pt");
  CliRun run = RunCli({"export", StorePath(), "44", "--format", "torch", "--out", out});
  ASSERT_EQ(run.exit_code, 0) << run.err;

  std::map<std::string, torch::Tensor> by_name = LoadTorchDict(out);
  ASSERT_EQ(by_name.size(), expected.size());
  for (const Expected& e : expected) {
    ASSERT_EQ(by_name.count(e.name), 1u) << e.name;
    const torch::Tensor& t = by_name[e.name];
    EXPECT_EQ(t.sizes().vec(), e.spec.shape) << e.name;
    EXPECT_TRUE(t.is_contiguous()) << e.name;
    ASSERT_EQ(static_cast<size_t>(t.numel() * t.element_size()), e.spec.data.size()) << e.name;
    if (!e.spec.data.empty()) {
      EXPECT_EQ(std::memcmp(t.data_ptr(), e.spec.data.data(), e.spec.data.size()), 0) << e.name;
    }
  }
  EXPECT_EQ(by_name["ß.gewicht"].scalar_type(), torch::kComplexDouble);
  EXPECT_EQ(by_name["half.special"].scalar_type(), torch::kFloat16);
  EXPECT_EQ(by_name["scalar.bool"].dim(), 0);
  EXPECT_EQ(by_name["scalar.bool"].item<bool>(), true);
  EXPECT_EQ(by_name["empty.int8"].scalar_type(), torch::kInt8);

  CliRun checker = RunProgram(TRAINSNAP_CLI_TEST_PYTHON,
                              {TRAINSNAP_TORCH_EXPORT_CHECKER, out, WriteTorchExpected(dir_.path(), expected)});
  EXPECT_EQ(checker.exit_code, 0) << checker.out << checker.err;
  EXPECT_EQ(checker.out, "OK " + std::to_string(expected.size()) + " tensors\n") << checker.err;
}

// The pickle, byte for byte, for one tensor: protocol 2, the storage as a
// persistent id, torch._utils._rebuild_tensor_v2 (torch.save's layout).
TEST(TorchArchiveWriterTest, PickleBytesForOneTensor) {
  auto pickle = cli::TorchStateDictPickle({{"a", DType::kFloat32, {2, 3}, 24}});
  ASSERT_TRUE(pickle.ok()) << pickle.status().ToString();
  const std::string expected = std::string("\x80\x02}(X\x01\x00\x00\x00" "a", 10) +
                               "ctorch._utils\n_rebuild_tensor_v2\n((" + std::string("X\x07\x00\x00\x00", 5) +
                               "storagectorch\nFloatStorage\n" + std::string("X\x01\x00\x00\x00", 5) + "0" +
                               std::string("X\x03\x00\x00\x00", 5) + "cpuK\x06tQ" + std::string("K\x00", 2) +
                               "(K\x02K\x03t(K\x03K\x01t\x89" "ccollections\nOrderedDict\n)RtRu.";
  EXPECT_EQ(*pickle, expected);
  auto empty = cli::TorchStateDictPickle({});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, std::string("\x80\x02}.", 4));
}

TEST(TorchArchiveWriterTest, RefusesBadEntriesAndLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.path() + "/bad.pt";
  auto not_utf8 = cli::TorchArchiveWriter::Create(path, {{std::string("a\xff", 2), DType::kFloat32, {1}, 4}});
  EXPECT_EQ(not_utf8.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(not_utf8.status().message().find("is not valid UTF-8"), std::string::npos) << not_utf8.status().ToString();
  auto overlong = cli::TorchArchiveWriter::Create(path, {{std::string("\xc0\xaf", 2), DType::kFloat32, {1}, 4}});
  EXPECT_EQ(overlong.status().code(), StatusCode::kInvalidArgument);
  auto wrong_bytes = cli::TorchArchiveWriter::Create(path, {{"a", DType::kFloat32, {2}, 4}});
  EXPECT_EQ(wrong_bytes.status().code(), StatusCode::kInvalidArgument);
  auto unknown = cli::TorchArchiveWriter::Create(path, {{"a", DType::kUnknown, {1}, 4}});
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 0);

  auto writer = cli::TorchArchiveWriter::Create(path, {{"a", DType::kInt32, {2}, 8}, {"b", DType::kInt8, {1}, 1}});
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  int32_t values[2] = {1, 2};
  EXPECT_EQ((*writer)->Append(values, 4).code(), StatusCode::kInvalidArgument);  // 8 bytes expected
  ASSERT_TRUE((*writer)->Append(values, 8).ok());
  Status unfinished = (*writer)->Finish();  // "b" was not appended
  EXPECT_EQ(unfinished.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unfinished.message().find("1 tensors were not appended"), std::string::npos) << unfinished.ToString();
  writer->reset();
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 0);
}

// Sizes and offsets as zip64 fields (forced here on a small file; real
// exports use them past 4 GiB): both loaders read the file bitwise.
TEST(TorchArchiveWriterTest, Zip64RecordsLoadInLibTorchAndPython) {
  TempDir dir;
  const std::string path = dir.path() + "/zip64.pt";
  std::vector<Expected> expected = {
      {"w", {1, "param", DType::kFloat64, {3, 4}, RandomBytes(DType::kFloat64, 12, 1)}},
      {"e", {2, "param", DType::kBFloat16, {0, 2}, {}}},
      {"s", {3, "param", DType::kInt16, {}, RandomBytes(DType::kInt16, 1, 2)}},
  };
  std::vector<cli::TorchArchiveEntry> entries;
  for (const Expected& e : expected) entries.push_back({e.name, e.spec.dtype, e.spec.shape, e.spec.data.size()});
  cli::TorchArchiveOptions options;
  options.zip64_from = 0;
  auto writer = cli::TorchArchiveWriter::Create(path, entries, options);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  for (const Expected& e : expected) ASSERT_TRUE((*writer)->Append(e.spec.data.data(), e.spec.data.size()).ok());
  ASSERT_TRUE((*writer)->Finish().ok());

  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.find(std::string("PK\x06\x06", 4)), std::string::npos);  // zip64 end of central directory
  EXPECT_NE(bytes.find(std::string("PK\x06\x07", 4)), std::string::npos);  // and its locator

  std::map<std::string, torch::Tensor> by_name = LoadTorchDict(path);
  ASSERT_EQ(by_name.size(), 3u);
  EXPECT_EQ(std::memcmp(by_name["w"].data_ptr(), expected[0].spec.data.data(), 96), 0);
  EXPECT_EQ(by_name["e"].sizes().vec(), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(by_name["s"].dim(), 0);
  EXPECT_EQ(std::memcmp(by_name["s"].data_ptr(), expected[2].spec.data.data(), 2), 0);
  CliRun checker = RunProgram(TRAINSNAP_CLI_TEST_PYTHON,
                              {TRAINSNAP_TORCH_EXPORT_CHECKER, path, WriteTorchExpected(dir.path(), expected)});
  EXPECT_EQ(checker.exit_code, 0) << checker.out << checker.err;
  EXPECT_EQ(checker.out, "OK 3 tensors\n") << checker.err;
}

}  // namespace
}  // namespace trainsnap::cli_test
