// The tool on a store written by the Checkpointer: names come from the
// manifest's contract, optimizer state shows up per role, and an export of
// the parameters equals the live model bitwise.
#include <cstring>
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

TEST_F(CheckpointerStoreTest, ExportedParametersEqualTheModel) {
  const std::string out = Path("weights.pt");
  CliRun run = RunCli({"export", StorePath(), "2", "--format", "torch", "--out", out, "--role", "param"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::vector<torch::Tensor> tensors;
  torch::load(tensors, out);
  torch::serialize::InputArchive archive;
  archive.load_from(out);
  c10::IValue names;
  archive.read("names", names);
  ASSERT_EQ(tensors.size(), params_.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = names.toList().get(i).toStringRef();
    ASSERT_EQ(params_.count(name), 1u) << name;
    const torch::Tensor& expected = params_[name];
    ASSERT_EQ(tensors[i].sizes(), expected.sizes()) << name;
    ASSERT_EQ(tensors[i].scalar_type(), expected.scalar_type()) << name;
    EXPECT_EQ(std::memcmp(tensors[i].data_ptr(), expected.data_ptr(), expected.numel() * expected.element_size()), 0)
        << name;
  }
}

}  // namespace
}  // namespace trainsnap::cli_test
