#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>

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

template <typename T>
std::vector<uint8_t> Raw(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Values of every dtype beyond float32 and int64 (above), with exact
// expected differences: half and bfloat16 subnormals, complex magnitudes,
// NaN on both sides counting as equal.
TEST(DiffDTypesTest, MaxAbsDiffIsExactForEveryDType) {
  TempDir dir;
  const std::string store_path = dir.path() + "/store";
  const double nan = std::nan("");
  struct Case {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> a, b;
    double max_abs;
    std::optional<double> relative_l2;  // checked when set
  };
  const std::vector<Case> cases = {
      {"f16", DType::kFloat16, {4}, Raw<uint16_t>({0x3c00, 0x3800, 0x0001, 0x7bff}),
       Raw<uint16_t>({0x3e00, 0x3800, 0x0002, 0x7bff}), 0.5,
       std::sqrt(0.25 + std::ldexp(1.0, -48)) / std::sqrt(1.25 + std::ldexp(1.0, -48) + 65504.0 * 65504.0)},
      {"bf16", DType::kBFloat16, {3}, Raw<uint16_t>({0x3f80, 0x4049, 0x0001}), Raw<uint16_t>({0x3f80, 0xc1a0, 0x0001}),
       23.140625, std::nullopt},
      {"c64", DType::kComplex64, {2}, Raw<float>({1, 2, 0, 0}), Raw<float>({4, 6, 0, 0}), 5.0, std::sqrt(5.0)},
      {"c128", DType::kComplex128, {2}, Raw<double>({0.5, 0, nan, 1}), Raw<double>({0.5, 0.25, nan, 1}), 0.25,
       std::nullopt},
      {"flags", DType::kBool, {5}, {1, 0, 0, 1, 1}, {1, 1, 0, 1, 1}, 1.0, 1.0 / std::sqrt(3.0)},
      {"i8", DType::kInt8, {2}, Raw<int8_t>({-128, 5}), Raw<int8_t>({127, 5}), 255.0, std::nullopt},
      {"u8", DType::kUInt8, {2}, {0, 200}, {255, 200}, 255.0, std::nullopt},
      {"i16", DType::kInt16, {1}, Raw<int16_t>({-32768}), Raw<int16_t>({32767}), 65535.0, 65535.0 / 32768.0},
      {"i32", DType::kInt32, {2}, Raw<int32_t>({std::numeric_limits<int32_t>::min(), 0}),
       Raw<int32_t>({std::numeric_limits<int32_t>::max(), 0}), 4294967295.0, 4294967295.0 / 2147483648.0},
      {"f64", DType::kFloat64, {2}, Raw<double>({0.1, 2}), Raw<double>({0.3, 2}), std::abs(0.3 - 0.1),
       std::nullopt},
  };
  std::vector<TensorSpec> side_a, side_b;
  proto::TrainingManifest m;
  m.set_format_version(1);
  for (size_t i = 0; i < cases.size(); ++i) {
    auto* p = m.add_params();
    p->set_id(0x300 + i);
    p->add_names(cases[i].name);
    side_a.push_back({0x300 + i, "param", cases[i].dtype, cases[i].shape, cases[i].a});
    side_b.push_back({0x300 + i, "param", cases[i].dtype, cases[i].shape, cases[i].b});
  }
  {
    auto store = Store::Open(store_path, TestStoreOptions());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE(WriteSnapshot(**store, 1, side_a, m.SerializeAsString()).ok());
    ASSERT_TRUE(WriteSnapshot(**store, 2, side_b, m.SerializeAsString()).ok());
  }
  CliRun run = RunCli({"diff", store_path, "1", "2", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json doc = run.Json();
  std::map<std::string, nlohmann::json> t;
  for (const auto& e : doc["tensors"]) t[e["name"]] = e;
  ASSERT_EQ(t.size(), cases.size()) << doc.dump(1);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(t[c.name]["status"], "changed");
    EXPECT_EQ(t[c.name]["max_abs_diff"].get<double>(), c.max_abs);
    if (c.relative_l2.has_value()) {
      EXPECT_DOUBLE_EQ(t[c.name]["relative_l2"].get<double>(), *c.relative_l2);
    }
  }
  EXPECT_TRUE(t["c128"]["relative_l2"].is_null());  // ||a|| is NaN
  EXPECT_DOUBLE_EQ(t["bf16"]["relative_l2"].get<double>(),
                   23.140625 / std::sqrt(1.0 + 3.140625 * 3.140625 + std::ldexp(1.0, -266)));
}

}  // namespace
}  // namespace trainsnap::cli_test
