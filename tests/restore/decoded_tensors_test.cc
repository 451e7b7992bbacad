// DecodedTensors: every (param_id, role) is found, in the order it was added
// (the fast path) and in any other order (the sorted index), and nothing
// else is.
#include "restore/decoded_tensors.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace trainsnap::internal {
namespace {

// A one-element tensor holding `value`, so that a look-up shows which entry it found.
torch::Tensor Marked(int64_t value) { return torch::full({1}, value, torch::kInt64); }

int64_t Mark(const torch::Tensor* found) { return found == nullptr ? -1 : found->item<int64_t>(); }

struct Key {
  uint64_t id;
  std::string role;
};

// Keys as a restore adds them: per parameter, its value, gradient and
// prefixed optimizer state, then a buffer (IDs deliberately not sorted).
std::vector<Key> Keys() {
  std::vector<Key> keys;
  for (uint64_t id : {907u, 13u, 512u, 4u}) {
    keys.push_back({id, "param"});
    keys.push_back({id, "grad"});
  }
  for (uint64_t id : {907u, 13u, 512u, 4u}) {
    keys.push_back({id, "opt1/exp_avg"});
    keys.push_back({id, "opt1/exp_avg_sq"});
  }
  keys.push_back({77, "buffer"});
  return keys;
}

DecodedTensors Filled(const std::vector<Key>& keys) {
  DecodedTensors decoded;
  for (size_t i = 0; i < keys.size(); ++i) decoded.Add(keys[i].id, keys[i].role, Marked(static_cast<int64_t>(i)));
  return decoded;
}

TEST(DecodedTensorsTest, FindsEveryKeyInTheOrderAdded) {
  const std::vector<Key> keys = Keys();
  DecodedTensors decoded = Filled(keys);
  ASSERT_EQ(decoded.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(Mark(decoded.Find(keys[i].id, keys[i].role)), int64_t(i));
}

TEST(DecodedTensorsTest, FindsEveryKeyInReverseAndInterleavedOrder) {
  const std::vector<Key> keys = Keys();
  DecodedTensors decoded = Filled(keys);
  for (size_t i = keys.size(); i-- > 0;) EXPECT_EQ(Mark(decoded.Find(keys[i].id, keys[i].role)), int64_t(i));
  // Every other one, then the rest: misses and in-order runs mixed.
  for (size_t start : {1u, 0u}) {
    for (size_t i = start; i < keys.size(); i += 2) {
      EXPECT_EQ(Mark(decoded.Find(keys[i].id, keys[i].role)), int64_t(i));
    }
  }
}

TEST(DecodedTensorsTest, PrefixAndRoleMatchOnlyTheirConcatenation) {
  DecodedTensors decoded = Filled(Keys());
  EXPECT_EQ(Mark(decoded.Find(13, "opt1/", "exp_avg_sq")), 11);
  EXPECT_EQ(Mark(decoded.Find(13, "opt1/", "exp_avg")), 10);
  EXPECT_EQ(Mark(decoded.Find(13, "opt1/exp_", "avg")), 10);
  EXPECT_EQ(Mark(decoded.Find(13, "", "opt1/exp_avg")), 10);
  EXPECT_EQ(decoded.Find(13, "opt2/", "exp_avg"), nullptr);
  EXPECT_EQ(decoded.Find(13, "opt1", "exp_avg"), nullptr);  // no separator: another role
  EXPECT_EQ(decoded.Find(13, "exp_avg"), nullptr);
}

TEST(DecodedTensorsTest, AbsentKeysAreNullAndLeaveLaterLookupsWorking) {
  const std::vector<Key> keys = Keys();
  DecodedTensors decoded = Filled(keys);
  EXPECT_EQ(decoded.Find(14, "param"), nullptr);   // no such parameter
  EXPECT_EQ(decoded.Find(77, "param"), nullptr);   // no such role for it
  EXPECT_EQ(decoded.Find(907, "Param"), nullptr);  // roles are case-sensitive
  EXPECT_EQ(DecodedTensors().Find(1, "param"), nullptr);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(Mark(decoded.Find(keys[i].id, keys[i].role)), int64_t(i));
}

TEST(DecodedTensorsTest, AppendKeepsBothAndFindsAfterEarlierLookups) {
  const std::vector<Key> keys = Keys();
  const std::vector<Key> first(keys.begin(), keys.begin() + 5), second(keys.begin() + 5, keys.end());
  DecodedTensors decoded = Filled(first);
  EXPECT_EQ(Mark(decoded.Find(first[3].id, first[3].role)), 3);  // sorts its index
  DecodedTensors more;
  for (size_t i = 0; i < second.size(); ++i) more.Add(second[i].id, second[i].role, Marked(int64_t(5 + i)));
  decoded.Append(std::move(more));
  EXPECT_EQ(more.size(), 0u);
  ASSERT_EQ(decoded.size(), keys.size());
  for (size_t i = keys.size(); i-- > 0;) EXPECT_EQ(Mark(decoded.Find(keys[i].id, keys[i].role)), int64_t(i));
}

}  // namespace
}  // namespace trainsnap::internal
