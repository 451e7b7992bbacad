#include <algorithm>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "cli_fixture.h"
#include "manifest.pb.h"

namespace trainsnap::cli_test {
namespace {

class VerifyCommandTest : public CliTest {
 protected:
  void SetUp() override {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    proto::TrainingManifest m;
    m.set_format_version(1);
    auto* p = m.add_params();
    p->set_id(0xA);
    p->add_names("encoder.weight");
    ASSERT_TRUE(WriteSnapshot(*store, 1, {{0xA, "param", DType::kFloat32, {4096}, FloatBytes(RandomFloats(4096, 1))}},
                              m.SerializeAsString())
                    .ok());
    ASSERT_TRUE(WriteSnapshot(*store, 2,
                              {{0xA, "param", DType::kFloat32, {4096}, FloatBytes(RandomFloats(4096, 2))},
                               {0xA, "exp_avg", DType::kFloat32, {4096}, FloatBytes(RandomFloats(4096, 3))}},
                              m.SerializeAsString())
                    .ok());
    auto record = store->Tensor(2, 0xA, "exp_avg");
    ASSERT_TRUE(record.ok()) << record.status().ToString();
    ASSERT_EQ(record->chunks.size(), 4u);
    bad_hash_ = record->chunks[2].hash;
  }
  void Corrupt() { CorruptChunk(StorePath(), bad_hash_); }
  ChunkHash bad_hash_;
};

TEST_F(VerifyCommandTest, CleanStorePasses) {
  CliRun run = RunCli({"verify", StorePath(), "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(run.err.empty()) << run.err;
  nlohmann::json doc = run.Json();
  EXPECT_EQ(doc["schema"], "trainsnap.verify/1");
  EXPECT_EQ(doc["ok"], true);
  EXPECT_EQ(doc["snapshots"], 2);
  EXPECT_EQ(doc["tensors"], 3);
  EXPECT_EQ(doc["problems"].size(), 0u);
  CliRun human = RunCli({"verify", StorePath(), "--all"});
  EXPECT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find(": OK"), std::string::npos) << human.out;
}

TEST_F(VerifyCommandTest, CorruptChunkExitsThreeAndNamesStepParameterRoleChunk) {
  Corrupt();
  CliRun run = RunCli({"verify", StorePath(), "--all", "--json"});
  EXPECT_EQ(run.exit_code, 3) << run.err;
  nlohmann::json doc = run.Json();
  EXPECT_EQ(doc["ok"], false);
  ASSERT_EQ(doc["problems"].size(), 1u) << doc.dump(1);
  const auto& p = doc["problems"][0];
  EXPECT_EQ(p["step"], 2);
  EXPECT_EQ(p["param_id"], "0x000000000000000a");
  EXPECT_EQ(p["name"], "encoder.weight");
  EXPECT_EQ(p["role"], "exp_avg");
  EXPECT_EQ(p["chunk_index"], 2);
  EXPECT_EQ(p["chunk_hash"], bad_hash_.Hex());
  EXPECT_EQ(p["code"], "Corruption");
  EXPECT_EQ(doc["bad_steps"], (nlohmann::json{2}));
  // One line on stderr.
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  EXPECT_NE(run.err.find("corruption found"), std::string::npos) << run.err;

  CliRun human = RunCli({"verify", StorePath()});
  EXPECT_EQ(human.exit_code, 3);
  for (const std::string& expected :
       std::vector<std::string>{"1 problems in 1 snapshots", "encoder.weight", "exp_avg", bad_hash_.Hex()}) {
    EXPECT_NE(human.out.find(expected), std::string::npos) << "missing `" << expected << "` in\n" << human.out;
  }
  EXPECT_EQ(RunCli({"verify", StorePath(), "2"}).exit_code, 3);
  // Step 1 does not reference the bad chunk.
  CliRun clean = RunCli({"verify", StorePath(), "1", "--json"});
  EXPECT_EQ(clean.exit_code, 0) << clean.err;
  EXPECT_EQ(clean.Json()["snapshots"], 1);
}

TEST_F(VerifyCommandTest, ReadingACorruptChunkExitsThreeElsewhereToo) {
  Corrupt();
  CliRun run = RunCli({"export", StorePath(), "2", "--format", "safetensors", "--out", Path("x.safetensors")});
  EXPECT_EQ(run.exit_code, 3) << run.err;
  EXPECT_NE(run.err.find("exp_avg"), std::string::npos) << run.err;
  EXPECT_FALSE(std::filesystem::exists(Path("x.safetensors")));
  EXPECT_FALSE(std::filesystem::exists(Path("x.safetensors.tmp")));
  // The healthy snapshot still exports.
  EXPECT_EQ(RunCli({"export", StorePath(), "1", "--format", "torch", "--out", Path("x.pt")}).exit_code, 0);
}

TEST_F(VerifyCommandTest, WorksWhileAWriterHoldsTheStore) {
  auto writer = OpenStore();
  ASSERT_NE(writer, nullptr);
  ASSERT_TRUE(WriteSnapshot(*writer, 3, {{0xB, "param", DType::kInt8, {10}, RandomBytes(DType::kInt8, 10, 4)}}).ok());
  CliRun run = RunCli({"verify", StorePath(), "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.Json()["snapshots"], 3);
}

TEST_F(VerifyCommandTest, ProgressBarOnlyOnATerminal) {
  CliRun terminal = RunCliOnTerminal({"verify", StorePath()}, "");
  EXPECT_EQ(terminal.exit_code, 0) << terminal.out;
  EXPECT_NE(terminal.out.find("verify ["), std::string::npos) << terminal.out;
  EXPECT_NE(terminal.out.find("100%"), std::string::npos) << terminal.out;
  EXPECT_NE(terminal.out.find("ETA"), std::string::npos) << terminal.out;
  EXPECT_NE(terminal.out.find(": OK"), std::string::npos) << terminal.out;
  CliRun piped = RunCli({"verify", StorePath()});
  EXPECT_EQ(piped.exit_code, 0);
  EXPECT_TRUE(piped.err.empty()) << piped.err;
  EXPECT_EQ(piped.out.find("ETA"), std::string::npos) << piped.out;
}

TEST_F(VerifyCommandTest, UnreadableDatabaseExitsThree) {
  std::ofstream(StorePath() + "/CURRENT", std::ios::trunc) << "garbage";  // RocksDB's pointer to its manifest
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"verify", StorePath()}, {"list", StorePath()}, {"show", StorePath(), "1"}}) {
    CliRun run = RunCli(args);
    EXPECT_EQ(run.exit_code, 3) << args[0] << ": " << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    EXPECT_NE(run.err.find("Corruption"), std::string::npos) << run.err;
  }
}

}  // namespace
}  // namespace trainsnap::cli_test
