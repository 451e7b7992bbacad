#include <cmath>
#include <cstring>
#include <map>

#include <gtest/gtest.h>

#include "cli_fixture.h"
#include "manifest.pb.h"

namespace trainsnap::cli_test {
namespace {

std::string Manifest(const std::vector<std::pair<uint64_t, std::vector<std::string>>>& params,
                     const std::vector<int64_t>& shape_of_first) {
  proto::TrainingManifest m;
  m.set_format_version(1);
  for (const auto& [id, names] : params) {
    auto* p = m.add_params();
    p->set_id(id);
    for (const auto& n : names) p->add_names(n);
    p->set_dtype(static_cast<uint32_t>(DType::kFloat32));
    if (id == params.front().first) {
      for (int64_t d : shape_of_first) p->add_shape(d);
    }
  }
  return m.SerializeAsString();
}

class DiffCommandTest : public CliTest {
 protected:
  void SetUp() override {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    a1_ = RandomFloats(4096, 1);
    a2_ = a1_;
    a2_[1100] += 0.75f;  // chunk 1 of 4
    a2_[1200] -= 0.25f;  // same chunk
    std::vector<int64_t> counts(600);  // 4800 B: 2 chunks; small values, exact in float64
    for (size_t i = 0; i < counts.size(); ++i) counts[i] = static_cast<int64_t>(i) * 3;
    std::vector<uint8_t> ints1(counts.size() * 8);
    std::memcpy(ints1.data(), counts.data(), ints1.size());
    counts[599] += 1000;
    std::vector<uint8_t> ints2(ints1.size());
    std::memcpy(ints2.data(), counts.data(), ints2.size());
    std::vector<uint8_t> unchanged = RandomBytes(DType::kBFloat16, 300, 6);
    ASSERT_TRUE(WriteSnapshot(*store, 1,
                              {{0xA, "param", DType::kFloat32, {4096}, FloatBytes(a1_)},
                               {0xA, "exp_avg", DType::kFloat32, {4096}, FloatBytes(a1_)},
                               {0xB, "param", DType::kBFloat16, {300}, unchanged},
                               {0xC, "param", DType::kInt64, {600}, ints1},
                               {0xD, "param", DType::kFloat32, {2, 2}, FloatBytes({1, 2, 3, 4})}},
                              Manifest({{0xA, {"w"}}, {0xB, {"b"}}, {0xC, {"steps"}}, {0xD, {"gone"}}}, {4096}))
                    .ok());
    ASSERT_TRUE(WriteSnapshot(*store, 2,
                              {{0xA, "param", DType::kFloat32, {4096}, FloatBytes(a2_)},
                               {0xA, "exp_avg", DType::kFloat32, {64, 64}, FloatBytes(a1_)},
                               {0xB, "param", DType::kBFloat16, {300}, unchanged},
                               {0xC, "param", DType::kInt64, {600}, ints2},
                               {0xE, "param", DType::kFloat32, {1}, FloatBytes({5})}},
                              Manifest({{0xA, {"w", "w_tied"}}, {0xB, {"b"}}, {0xC, {"steps"}}, {0xE, {"new"}}},
                                       {64, 64}))
                    .ok());
  }
  std::vector<float> a1_, a2_;
};

TEST_F(DiffCommandTest, JsonReportsChunksValuesAndContract) {
  CliRun run = RunCli({"diff", StorePath(), "1", "2", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(run.err.empty()) << run.err;
  nlohmann::json doc = run.Json();
  EXPECT_EQ(doc["schema"], "trainsnap.diff/1");
  std::map<std::pair<std::string, std::string>, nlohmann::json> t;
  for (const auto& e : doc["tensors"]) t[{e["name"], e["role"]}] = e;
  ASSERT_EQ(t.size(), 6u) << doc["tensors"].dump(1);

  const auto& w = t[{"w", "param"}];
  EXPECT_EQ(w["status"], "changed");
  EXPECT_EQ(w["chunks"], 4);
  EXPECT_EQ(w["chunks_changed"], 1);
  EXPECT_DOUBLE_EQ(w["changed_chunk_fraction"].get<double>(), 0.25);
  double d1 = static_cast<double>(a2_[1100]) - a1_[1100], d2 = static_cast<double>(a2_[1200]) - a1_[1200];
  double norm = 0;
  for (float x : a1_) norm += static_cast<double>(x) * x;
  EXPECT_DOUBLE_EQ(w["max_abs_diff"].get<double>(), std::max(std::abs(d1), std::abs(d2)));
  EXPECT_NEAR(w["relative_l2"].get<double>(), std::sqrt(d1 * d1 + d2 * d2) / std::sqrt(norm), 1e-12);

  const auto& steps = t[{"steps", "param"}];
  EXPECT_EQ(steps["status"], "changed");
  EXPECT_EQ(steps["chunks_changed"], 1);
  EXPECT_EQ(steps["chunks"], 2);
  EXPECT_DOUBLE_EQ(steps["max_abs_diff"].get<double>(), 1000.0);

  const auto& b = t[{"b", "param"}];
  EXPECT_EQ(b["status"], "unchanged");
  EXPECT_EQ(b["chunks_changed"], 0);
  EXPECT_EQ(b["max_abs_diff"], 0.0);
  EXPECT_EQ(b["relative_l2"], 0.0);

  const auto& reshaped = t[{"w", "exp_avg"}];
  EXPECT_EQ(reshaped["status"], "reshaped");
  EXPECT_EQ(reshaped["shape_a"], (nlohmann::json{4096}));
  EXPECT_EQ(reshaped["shape_b"], (nlohmann::json{64, 64}));
  EXPECT_TRUE(reshaped["max_abs_diff"].is_null());

  EXPECT_EQ((t[{"gone", "param"}]["status"]), "removed");
  EXPECT_EQ((t[{"new", "param"}]["status"]), "added");
  EXPECT_EQ((t[{"new", "param"}]["dtype_a"]), nullptr);

  EXPECT_EQ(doc["summary"]["changed"], 2);
  EXPECT_EQ(doc["summary"]["added"], 1);
  EXPECT_EQ(doc["summary"]["removed"], 1);
  EXPECT_EQ(doc["summary"]["reshaped"], 1);

  EXPECT_EQ(doc["contract"]["compared"], true);
  std::map<std::string, nlohmann::json> kinds;
  for (const auto& c : doc["contract"]["differences"]) kinds[c["kind"].get<std::string>() + ":" + c["name"].get<std::string>()] = c;
  ASSERT_EQ(kinds.size(), 4u) << doc["contract"].dump(1);
  EXPECT_EQ((kinds["names:w"]["a"]), "w");
  EXPECT_EQ((kinds["names:w"]["b"]), "w, w_tied");
  EXPECT_EQ((kinds["shape:w"]["a"]), "[4096]");
  EXPECT_EQ((kinds["shape:w"]["b"]), "[64, 64]");
  EXPECT_EQ(kinds.count("removed:gone"), 1u);
  EXPECT_EQ(kinds.count("added:new"), 1u);
}

TEST_F(DiffCommandTest, HumanOutputIsATable) {
  CliRun run = RunCli({"diff", StorePath(), "1", "2"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const char* expected : {"diff 1 -> 2: 6 tensors, 2 changed, 1 added, 1 removed, 1 reshaped",
                               "CHANGED CHUNKS", "1/4 (25%)", "contract: 4 differences", "w, w_tied"}) {
    EXPECT_NE(run.out.find(expected), std::string::npos) << "missing `" << expected << "` in\n" << run.out;
  }
}

TEST_F(DiffCommandTest, SameSnapshotHasNoChanges) {
  CliRun run = RunCli({"diff", StorePath(), "2", "2", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json doc = run.Json();
  EXPECT_EQ(doc["summary"]["chunks_changed"], 0);
  EXPECT_EQ(doc["contract"]["differences"].size(), 0u);
  for (const auto& t : doc["tensors"]) EXPECT_EQ(t["status"], "unchanged");
}

}  // namespace
}  // namespace trainsnap::cli_test
