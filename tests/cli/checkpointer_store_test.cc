// The tool on a store written by the Checkpointer: names come from the
// manifest's contract, optimizer state shows up per role, and an export of
// the parameters equals the live model bitwise.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cli_fixture.h"
#include "trainsnap/checkpointer.h"

namespace trainsnap::cli_test {
namespace {

class CheckpointerStoreTest : public CliTest {
 protected:
  void SetUp() override {
    torch::manual_seed(0);
    torch::nn::Sequential model(torch::nn::Linear(8, 4), torch::nn::ReLU(), torch::nn::Linear(4, 2));
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    Checkpointer checkpointer(*store);
    TrainingState state;
    state.model = model.ptr().get();
    state.optimizer = &optimizer;
    for (int64_t step = 1; step <= 2; ++step) {
      optimizer.zero_grad();
      torch::Tensor loss = model->forward(torch::randn({16, 8})).square().mean();
      loss.backward();
      optimizer.step();
      Status s = checkpointer.Capture(step, state);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    for (const auto& p : model->named_parameters()) params_[p.key()] = p.value().detach().clone();
  }
  std::map<std::string, torch::Tensor> params_;
};

TEST_F(CheckpointerStoreTest, ShowUsesTheContractNames) {
  CliRun run = RunCli({"show", StorePath(), "2", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json doc = run.Json();
  ASSERT_FALSE(doc["manifest"].is_null()) << doc["manifest_error"];
  std::set<std::string> contract;
  for (const auto& p : doc["manifest"]["params"]) contract.insert(p["names"][0].get<std::string>());
  EXPECT_EQ(contract, (std::set<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(doc["manifest"]["optimizers"][0]["type"], "Adam");
  std::set<std::pair<std::string, std::string>> tensors;
  for (const auto& t : doc["tensors"]) {
    tensors.insert(std::make_pair(t["name"].get<std::string>(), t["role"].get<std::string>()));
  }
  for (const char* name : {"0.weight", "0.bias", "2.weight", "2.bias"}) {
    EXPECT_EQ((tensors.count({name, "param"})), 1u) << name;
    EXPECT_EQ((tensors.count({name, "exp_avg"})), 1u) << name;
    EXPECT_EQ((tensors.count({name, "exp_avg_sq"})), 1u) << name;
  }
  CliRun human = RunCli({"show", StorePath(), "2"});
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("contract: 4 trainable parameters"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("Adam"), std::string::npos) << human.out;
}

TEST_F(CheckpointerStoreTest, DiffSeesTheTrainingStep) {
  CliRun run = RunCli({"diff", StorePath(), "1", "2", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json doc = run.Json();
  EXPECT_EQ(doc["contract"]["compared"], true);
  EXPECT_EQ(doc["contract"]["differences"].size(), 0u);
  int changed_params = 0;
  for (const auto& t : doc["tensors"]) {
    if (t["role"] == "param" && t["status"] == "changed") {
      ++changed_params;
      EXPECT_GT(t["max_abs_diff"].get<double>(), 0.0) << t.dump();
      EXPECT_GT(t["relative_l2"].get<double>(), 0.0) << t.dump();
      EXPECT_DOUBLE_EQ(t["changed_chunk_fraction"].get<double>(), 1.0) << t.dump();  // one small chunk each
    }
  }
  EXPECT_EQ(changed_params, 4);  // Adam moves every parameter
}

// The torch export is a plain dict {name: tensor} (torch.save's layout).
std::map<std::string, torch::Tensor> LoadTorchExport(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::map<std::string, torch::Tensor> out;
  c10::IValue value = torch::pickle_load(bytes);
  EXPECT_TRUE(value.isGenericDict()) << value.tagKind();
  if (!value.isGenericDict()) return out;
  for (const auto& entry : value.toGenericDict()) out[entry.key().toStringRef()] = entry.value().toTensor();
  return out;
}

bool BitwiseEqual(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && a.is_contiguous() && b.is_contiguous() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) == 0;
}

TEST_F(CheckpointerStoreTest, ExportedParametersEqualTheModel) {
  const std::string out = Path("weights.pt");
  CliRun run = RunCli({"export", StorePath(), "2", "--format", "torch", "--out", out, "--role", "param"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::map<std::string, torch::Tensor> tensors = LoadTorchExport(out);
  ASSERT_EQ(tensors.size(), params_.size());
  for (const auto& [name, expected] : params_) {
    ASSERT_EQ(tensors.count(name), 1u) << name;
    EXPECT_TRUE(BitwiseEqual(tensors[name], expected)) << name;
  }
  // --model "" is TrainingState::model: its state dict (no Adam state).
  CliRun model = RunCli({"export", StorePath(), "2", "--format", "torch", "--out", Path("model.pt"), "--model", ""});
  ASSERT_EQ(model.exit_code, 0) << model.err;
  std::map<std::string, torch::Tensor> state = LoadTorchExport(Path("model.pt"));
  ASSERT_EQ(state.size(), params_.size());
  for (const auto& [name, expected] : params_) {
    ASSERT_EQ(state.count(name), 1u) << name;
    EXPECT_TRUE(BitwiseEqual(state[name], expected)) << name;
  }
}

// A GAN's two models, with BatchNorm buffers, captured together.
class TwoModelStoreTest : public CliTest {
 protected:
  void SetUp() override {
    torch::manual_seed(3);
    generator_ = torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::BatchNorm1d(16), torch::nn::ReLU(),
                                       torch::nn::Linear(16, 4));
    discriminator_ = torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8), torch::nn::ReLU(),
                                           torch::nn::Linear(8, 1));
    torch::optim::Adam g_opt(generator_->parameters(), torch::optim::AdamOptions(1e-2));
    torch::optim::Adam d_opt(discriminator_->parameters(), torch::optim::AdamOptions(1e-2));
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    CheckpointerOptions options;
    options.model_state = ModelState::kTrainableAndBuffers;
    Checkpointer checkpointer(*store, options);
    TrainingState state;
    state.models = {{"G", generator_.ptr().get()}, {"D", discriminator_.ptr().get()}};
    state.optimizers = {{"G", &g_opt}, {"D", &d_opt}};
    for (int64_t step = 1; step <= 2; ++step) {  // train mode: the running statistics move
      g_opt.zero_grad();
      d_opt.zero_grad();
      torch::Tensor loss = discriminator_->forward(generator_->forward(torch::randn({32, 8}))).square().mean();
      loss.backward();
      g_opt.step();
      d_opt.step();
      Status s = checkpointer.Capture(step, state);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }

  // The module's state dict: parameters and buffers by their own names.
  static std::map<std::string, torch::Tensor> StateDict(const torch::nn::Module& module) {
    std::map<std::string, torch::Tensor> out;
    for (const auto& p : module.named_parameters()) out[p.key()] = p.value().detach();
    for (const auto& b : module.named_buffers()) out[b.key()] = b.value();
    return out;
  }

  torch::nn::Sequential generator_{nullptr};
  torch::nn::Sequential discriminator_{nullptr};
};

TEST_F(TwoModelStoreTest, ExportOfOneModelIsItsStateDictByItsOwnNames) {
  const std::string out = Path("g.pt");
  CliRun run = RunCli({"export", StorePath(), "2", "--format", "torch", "--out", out, "--model", "G", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.Json()["model"], "G");
  const auto expected = StateDict(*generator_);
  ASSERT_EQ(expected.count("1.running_mean"), 1u);  // the premise: buffers are part of it
  std::map<std::string, torch::Tensor> tensors = LoadTorchExport(out);
  std::vector<std::string> names, expected_names;
  for (const auto& [name, t] : tensors) names.push_back(name);
  for (const auto& [name, t] : expected) expected_names.push_back(name);
  EXPECT_EQ(names, expected_names);  // no "G/" prefix, no ":buffer", nothing of D
  for (const auto& [name, t] : expected) {
    ASSERT_EQ(tensors.count(name), 1u) << name;
    EXPECT_TRUE(BitwiseEqual(tensors[name], t.contiguous())) << name;
  }
  // LibTorch's load by name: a fresh module takes every entry, strictly.
  torch::nn::Sequential fresh(torch::nn::Linear(8, 16), torch::nn::BatchNorm1d(16), torch::nn::ReLU(),
                              torch::nn::Linear(16, 4));
  auto target = StateDict(*fresh);
  ASSERT_EQ(target.size(), tensors.size());
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, t] : target) t.copy_(tensors.at(name));
  }
  generator_->eval();
  fresh->eval();
  torch::Tensor input = torch::randn({5, 8});
  EXPECT_TRUE(BitwiseEqual(fresh->forward(input), generator_->forward(input)));

  // Unknown model: not found, naming the ones there are; nothing written.
  CliRun missing = RunCli({"export", StorePath(), "2", "--format", "torch", "--out", Path("x.pt"), "--model", "E"});
  EXPECT_EQ(missing.exit_code, 4) << missing.err;
  EXPECT_NE(missing.err.find("no model `E` (models: `D`, `G`)"), std::string::npos) << missing.err;
  EXPECT_FALSE(std::filesystem::exists(Path("x.pt")));
}

TEST_F(TwoModelStoreTest, PythonTorchLoadGivesAPlainDictThatLoadStateDictTakes) {
  for (const auto& [key, module_name] : std::vector<std::pair<std::string, std::string>>{
           {"G", "generator"}, {"D", "discriminator"}}) {
    const std::string out = Path(key + ".pt");
    CliRun run = RunCli({"export", StorePath(), "2", "--format", "torch", "--out", out, "--model", key});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const std::string loaded = Path(key + ".bytes");
    CliRun python = RunProgram(TRAINSNAP_CLI_TEST_PYTHON, {TRAINSNAP_TORCH_EXPORT_LOADER, out, module_name, loaded});
    const auto expected = StateDict(key == "G" ? *generator_ : *discriminator_);
    ASSERT_EQ(python.exit_code, 0) << python.out << python.err;
    EXPECT_EQ(python.out, "OK " + std::to_string(expected.size()) + " tensors\n") << python.err;
    std::string want;
    for (const auto& [name, t] : expected) {
      torch::Tensor c = t.contiguous();
      want.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
    }
    std::ifstream in(loaded, std::ios::binary);
    std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(got.size(), want.size()) << key;
    EXPECT_TRUE(got == want) << key << ": Python's loaded state differs bitwise";
  }
}

TEST_F(TwoModelStoreTest, SafetensorsOfOneModelUsesItsOwnNames) {
  const std::string out = Path("d.safetensors");
  CliRun run = RunCli({"export", StorePath(), "2", "--format", "safetensors", "--out", out, "--model", "D"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::ifstream in(out, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(file.size(), 8u);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | static_cast<uint8_t>(file[i]);
  nlohmann::json header = nlohmann::json::parse(file.substr(8, header_bytes));
  const std::string data = file.substr(8 + header_bytes);
  const auto expected = StateDict(*discriminator_);
  std::vector<std::string> names;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() != "__metadata__") names.push_back(it.key());
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> expected_names;
  for (const auto& [name, t] : expected) expected_names.push_back(name);
  EXPECT_EQ(names, expected_names);
  for (const auto& [name, t] : expected) {
    torch::Tensor c = t.contiguous();
    const auto offsets = header[name]["data_offsets"];
    const uint64_t begin = offsets[0], end = offsets[1];
    ASSERT_EQ(end - begin, static_cast<uint64_t>(c.numel() * c.element_size())) << name;
    EXPECT_EQ(std::memcmp(data.data() + begin, c.data_ptr(), end - begin), 0) << name;
  }
}

}  // namespace
}  // namespace trainsnap::cli_test
