// export: the safetensors file is read back by an independent Python reader
// (json + numpy), the torch archive by torch::load; both compared bitwise.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include <gtest/gtest.h>
#include <torch/torch.h>

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

// The torch export is a plain dict {name: tensor} (torch::pickle_save):
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

}  // namespace
}  // namespace trainsnap::cli_test
