// The tool on a store whose checkpointer manifests are split (manifest
// format version 2, store format version 6): a layout of 300 parameters,
// over 4 KiB, is one shared chunk in the packs, and each snapshot keeps its
// own small part. show, diff and export read the joined manifest (names from
// the layout, per-snapshot fields from the snapshot); verify names a damaged
// layout chunk, and show then reports the manifest as unreadable while still
// listing the tensors.
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cli_fixture.h"
#include "store/chunk_hash.h"
#include "trainsnap/checkpointer.h"

namespace trainsnap::cli_test {
namespace {

constexpr int kLayers = 150;  // 300 parameters: the layout is stored as a chunk

class SplitManifestStoreTest : public CliTest {
 protected:
  void SetUp() override {
    torch::manual_seed(5);
    torch::nn::Sequential model;
    for (int i = 0; i < kLayers; ++i) model->push_back(torch::nn::Linear(2, 2));
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    Checkpointer checkpointer(*store);
    TrainingState state;
    state.model = model.ptr().get();
    state.optimizer = &optimizer;
    for (int64_t step = 1; step <= 2; ++step) {
      optimizer.zero_grad();
      // Every layer on the same input (not chained): every gradient is
      // non-zero, so Adam moves every parameter.
      torch::Tensor x = torch::randn({4, 2});
      torch::Tensor loss = torch::zeros({});
      for (const auto& layer : model->children()) {
        loss = loss + layer->as<torch::nn::Linear>()->forward(x).square().mean();
      }
      loss.backward();
      optimizer.step();
      Status s = checkpointer.Capture(step, state);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    for (const auto& p : model->named_parameters()) params_[p.key()] = p.value().detach().clone();
    auto layout1 = store->SharedManifest(1);
    auto layout2 = store->SharedManifest(2);
    ASSERT_TRUE(layout1.ok()) << layout1.status().ToString();
    ASSERT_TRUE(layout2.ok()) << layout2.status().ToString();
    ASSERT_EQ(*layout1, *layout2);  // one layout, stored once
    ASSERT_GE(layout1->size(), 4096u);
    layout_hash_ = internal::HashChunk(layout1->data(), layout1->size());
    auto own = store->Manifest(2);
    ASSERT_TRUE(own.ok());
    own_bytes_ = own->size();
  }
  std::map<std::string, torch::Tensor> params_;
  ChunkHash layout_hash_;
  size_t own_bytes_ = 0;
};

TEST_F(SplitManifestStoreTest, ShowJoinsTheLayoutAndTheSnapshotsOwnPart) {
  CliRun run = RunCli({"show", StorePath(), "2", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json doc = run.Json();
  ASSERT_FALSE(doc["manifest"].is_null()) << doc["manifest_error"];
  EXPECT_TRUE(doc["manifest_error"].is_null());
  EXPECT_EQ(doc["manifest"]["format_version"], 2);
  EXPECT_EQ(doc["manifest"]["step"], "2");  // the snapshot's own part (int64 as JSON string)
  ASSERT_EQ(doc["manifest"]["params"].size(), 2u * kLayers);
  EXPECT_EQ(doc["manifest"]["params"][0]["names"][0], "0.weight");
  EXPECT_EQ(doc["manifest"]["params"][0]["grad"], "GRAD_STORED");  // from the own part's runs
  EXPECT_EQ(doc["manifest"]["optimizers"][0]["params"][0]["step"], "2");
  // The record holds only the snapshot's own part.
  EXPECT_EQ(doc["info"]["manifest_bytes"], own_bytes_);
  std::set<std::string> names;
  for (const auto& t : doc["tensors"]) {
    if (t["role"] == "param") names.insert(t["name"].get<std::string>());
  }
  EXPECT_EQ(names.size(), 2u * kLayers);
  EXPECT_EQ(names.count("149.bias"), 1u);

  CliRun text = RunCli({"show", StorePath(), "1"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("149.weight"), std::string::npos) << text.out;
}

TEST_F(SplitManifestStoreTest, DiffComparesTheJoinedContracts) {
  CliRun run = RunCli({"diff", StorePath(), "1", "2", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json doc = run.Json();
  EXPECT_EQ(doc["contract"]["compared"], true);
  EXPECT_EQ(doc["contract"]["differences"].size(), 0u);
  std::set<std::string> changed;
  for (const auto& t : doc["tensors"]) {
    if (t["role"] == "param" && t["status"] == "changed") changed.insert(t["name"].get<std::string>());
  }
  EXPECT_EQ(changed.size(), 2u * kLayers);  // Adam moves every parameter
  EXPECT_EQ(changed.count("77.weight"), 1u);
}

TEST_F(SplitManifestStoreTest, ExportOfTheModelIsItsStateDictBitwise) {
  const std::string out = Path("model.pt");
  CliRun run = RunCli({"export", StorePath(), "2", "--format", "torch", "--out", out, "--model", ""});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::ifstream in(out, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value = torch::pickle_load(bytes);
  ASSERT_TRUE(value.isGenericDict());
  std::map<std::string, torch::Tensor> state;
  for (const auto& entry : value.toGenericDict()) state[entry.key().toStringRef()] = entry.value().toTensor();
  ASSERT_EQ(state.size(), params_.size());
  for (const auto& [name, expected] : params_) {
    ASSERT_EQ(state.count(name), 1u) << name;
    const torch::Tensor& got = state[name];
    ASSERT_EQ(got.sizes(), expected.sizes()) << name;
    EXPECT_EQ(std::memcmp(got.data_ptr(), expected.data_ptr(), expected.numel() * expected.element_size()), 0)
        << name;
  }
}

TEST_F(SplitManifestStoreTest, VerifyNamesADamagedLayoutAndShowStillListsTheTensors) {
  CorruptChunk(StorePath(), layout_hash_);
  CliRun run = RunCli({"verify", StorePath(), "--json"});
  EXPECT_EQ(run.exit_code, 3) << run.err;  // kCorruption
  nlohmann::json doc = run.Json();
  ASSERT_EQ(doc["problems"].size(), 2u) << doc.dump();  // both snapshots reference it
  for (int i = 0; i < 2; ++i) {
    const nlohmann::json& p = doc["problems"][i];
    EXPECT_EQ(p["step"], i + 1);
    EXPECT_EQ(p["code"], "Corruption");
    const std::string message = p["message"].get<std::string>();
    EXPECT_NE(message.find("shared manifest " + layout_hash_.Hex()), std::string::npos) << message;
  }
  CliRun show = RunCli({"show", StorePath(), "2", "--json"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  nlohmann::json shown = show.Json();
  EXPECT_TRUE(shown["manifest"].is_null());
  ASSERT_TRUE(shown["manifest_error"].is_string());
  EXPECT_NE(shown["manifest_error"].get<std::string>().find("shared manifest " + layout_hash_.Hex()),
            std::string::npos)
      << shown["manifest_error"];
  EXPECT_EQ(shown["tensors"].size(), shown["info"]["tensors"].get<size_t>());
  EXPECT_GE(shown["tensors"].size(), 2u * kLayers);
}

}  // namespace
}  // namespace trainsnap::cli_test
