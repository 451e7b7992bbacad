#include <map>

#include <gtest/gtest.h>

#include "cli_fixture.h"
#include "manifest.pb.h"

namespace trainsnap::cli_test {
namespace {

// A manifest as the checkpointer writes it: a tied parameter, an adapter, a
// buffer, an Adam optimizer, a scheduler, an accumulation window, extra state.
std::string TestManifest() {
  proto::TrainingManifest m;
  m.set_format_version(1);
  m.set_step(5);
  m.set_model_state(1);
  m.add_models("");
  auto* w = m.add_params();
  w->set_id(0xA);
  w->add_names("embed.weight");
  w->add_names("head.weight");
  w->add_shape(64);
  w->add_shape(64);
  w->set_dtype(static_cast<uint32_t>(DType::kFloat32));
  w->set_device("cpu");
  w->set_grad(proto::GRAD_STORED);
  auto* lora = m.add_params();
  lora->set_id(0xB);
  lora->add_names("layers.0.lora_A");
  lora->add_shape(100);
  lora->set_dtype(static_cast<uint32_t>(DType::kInt32));
  auto* buffer = m.add_model_tensors();
  buffer->set_id(0xC);
  buffer->add_names("norm.running_mean");
  buffer->set_role("buffer");
  buffer->add_shape(8);
  buffer->set_dtype(static_cast<uint32_t>(DType::kFloat32));
  m.mutable_base()->set_label("base-model@rev1");
  auto* frozen = m.mutable_base()->add_frozen();
  frozen->set_name("layers.0.weight");
  auto* adam = m.add_optimizers();
  adam->set_type("Adam");
  auto* group = adam->add_groups();
  group->add_param_ids(0xA);
  group->add_param_ids(0xB);
  group->mutable_options()->set_lr(0.001);
  group->mutable_options()->set_beta1(0.9);
  group->mutable_options()->set_beta2(0.999);
  group->mutable_options()->set_eps(1e-8);
  auto* state = adam->add_params();
  state->set_param_id(0xA);
  state->set_step(5);
  state->add_roles("exp_avg");
  state->add_roles("exp_avg_sq");
  m.mutable_scheduler()->set_step_count(7);
  m.mutable_accumulation()->set_micro_step(2);
  m.mutable_accumulation()->set_size(4);
  auto* extra = m.add_extra();
  extra->set_name("loader");
  extra->set_state("cursor=12");
  return m.SerializeAsString();
}

class ShowCommandTest : public CliTest {
 protected:
  void SetUp() override {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    tensors_ = {{0xA, "param", DType::kFloat32, {64, 64}, FloatBytes(RandomFloats(4096, 1))},
                {0xA, "exp_avg", DType::kFloat32, {64, 64}, FloatBytes(RandomFloats(4096, 2))},
                {0xB, "param", DType::kInt32, {100}, RandomBytes(DType::kInt32, 100, 3)},
                {0xC, "buffer", DType::kFloat32, {8}, FloatBytes(RandomFloats(8, 4))}};
    auto info = WriteSnapshot(*store, 5, tensors_, TestManifest());
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    info_ = *info;
    ASSERT_TRUE(WriteSnapshot(*store, 6, {tensors_[2]}).ok());  // no manifest
    ASSERT_TRUE(WriteSnapshot(*store, 7, {tensors_[2]}, "\xff\xff not a protobuf").ok());
  }
  std::vector<TensorSpec> tensors_;
  SnapshotInfo info_;
};

TEST_F(ShowCommandTest, JsonHasTheManifestAndNamedTensors) {
  CliRun run = RunCli({"show", StorePath(), "5", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json doc = run.Json();
  EXPECT_EQ(doc["schema"], "trainsnap.show/1");
  EXPECT_EQ(doc["info"]["step"], 5);
  EXPECT_EQ(doc["info"]["tensors"], 4);
  EXPECT_EQ(doc["info"]["logical_bytes"], info_.logical_bytes);
  EXPECT_EQ(doc["info"]["manifest_bytes"], info_.manifest_bytes);
  EXPECT_TRUE(doc["manifest_error"].is_null());
  const auto& m = doc["manifest"];
  ASSERT_EQ(m["params"].size(), 2u);
  EXPECT_EQ(m["params"][0]["names"], (nlohmann::json{"embed.weight", "head.weight"}));
  EXPECT_EQ(m["params"][0]["shape"], (nlohmann::json{"64", "64"}));  // proto3 JSON: int64 as strings
  EXPECT_EQ(m["optimizers"][0]["type"], "Adam");
  EXPECT_DOUBLE_EQ(m["optimizers"][0]["groups"][0]["options"]["lr"].get<double>(), 0.001);
  EXPECT_EQ(m["scheduler"]["step_count"], "7");
  EXPECT_EQ(m["base"]["label"], "base-model@rev1");
  ASSERT_EQ(doc["tensors"].size(), 4u);
  std::map<std::pair<std::string, std::string>, nlohmann::json> by_name;
  for (const auto& t : doc["tensors"]) by_name[{t["name"], t["role"]}] = t;
  ASSERT_EQ((by_name.count({"embed.weight", "param"})), 1u) << doc["tensors"].dump();
  ASSERT_EQ((by_name.count({"embed.weight", "exp_avg"})), 1u);
  ASSERT_EQ((by_name.count({"layers.0.lora_A", "param"})), 1u);
  ASSERT_EQ((by_name.count({"norm.running_mean", "buffer"})), 1u);
  const auto& lora = by_name[{"layers.0.lora_A", "param"}];
  EXPECT_EQ(lora["param_id"], "0x000000000000000b");
  EXPECT_EQ(lora["dtype"], "int32");
  EXPECT_EQ(lora["shape"], (nlohmann::json{100}));
  EXPECT_EQ(lora["bytes"], 400);
  EXPECT_EQ((by_name[{"embed.weight", "param"}]["chunks"]), 4);
}

TEST_F(ShowCommandTest, HumanOutputShowsContractOptimizerAndSizes) {
  CliRun run = RunCli({"show", StorePath(), "5"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const char* expected :
       {"contract: 2 trainable parameters", "embed.weight", "head.weight", "[64, 64]", "float32", "stored",
        "model state trainable+buffers", "norm.running_mean", "label \"base-model@rev1\"", "1 frozen parameters",
        "Adam", "lr=0.001 betas=(0.9, 0.999) eps=1e-08", "exp_avg, exp_avg_sq", "scheduler: step_count 7",
        "micro-step 2 of 4", "loader (9 B)", "16.0 KiB", "tensors: 4"}) {
    EXPECT_NE(run.out.find(expected), std::string::npos) << "missing `" << expected << "` in\n" << run.out;
  }
}

TEST_F(ShowCommandTest, WithoutAManifestNamesAreHexIds) {
  CliRun run = RunCli({"show", StorePath(), "6", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json doc = run.Json();
  EXPECT_TRUE(doc["manifest"].is_null());
  EXPECT_TRUE(doc["manifest_error"].is_null());
  EXPECT_EQ(doc["tensors"][0]["name"], "0x000000000000000b");

  CliRun bad = RunCli({"show", StorePath(), "7", "--json"});
  ASSERT_EQ(bad.exit_code, 0) << bad.err;
  EXPECT_TRUE(bad.Json()["manifest"].is_null());
  EXPECT_TRUE(bad.Json()["manifest_error"].is_string());
  EXPECT_EQ(bad.Json()["tensors"][0]["name"], "0x000000000000000b");
  CliRun human = RunCli({"show", StorePath(), "7"});
  EXPECT_NE(human.out.find("does not parse"), std::string::npos) << human.out;
}

}  // namespace
}  // namespace trainsnap::cli_test
