// Small host tensors cut from slabs: where each piece lies, what it keeps
// alive, and when a slab is used up.
#include "torch/slab_chain.h"

#include <cstdint>
#include <cstring>

#include <gtest/gtest.h>

namespace trainsnap::internal {
namespace {

const uint8_t* Bytes(const torch::Tensor& t) { return static_cast<const uint8_t*>(t.data_ptr()); }

TEST(SlabChainTest, PiecesLieInTheSlabAtAlignedOffsetsWithTheirShapeAndDtype) {
  torch::Tensor slab = torch::empty({1024}, torch::kUInt8);
  size_t used = 0;
  torch::Tensor a = CutFromSlab(slab, &used, {3, 5}, torch::kFloat);  // 60 bytes -> 64
  ASSERT_TRUE(a.defined());
  EXPECT_EQ(used, 64u);
  torch::Tensor b = CutFromSlab(slab, &used, {65}, torch::kDouble);  // 520 bytes -> 576
  ASSERT_TRUE(b.defined());
  EXPECT_EQ(used, 640u);
  torch::Tensor c = CutFromSlab(slab, &used, {2}, torch::kBFloat16);
  EXPECT_EQ(used, 704u);

  EXPECT_EQ(Bytes(a), Bytes(slab));
  EXPECT_EQ(Bytes(b), Bytes(slab) + 64);
  EXPECT_EQ(Bytes(c), Bytes(slab) + 640);
  EXPECT_EQ(a.sizes(), c10::IntArrayRef({3, 5}));
  EXPECT_EQ(b.sizes(), c10::IntArrayRef({65}));
  EXPECT_EQ(a.scalar_type(), torch::kFloat);
  EXPECT_EQ(b.scalar_type(), torch::kDouble);
  EXPECT_EQ(c.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(a.is_contiguous());
  EXPECT_TRUE(b.is_contiguous());
  EXPECT_EQ(a.device(), torch::Device(torch::kCPU));
  EXPECT_FALSE(a.requires_grad());

  // Writes through a piece land in the slab's bytes, and the reverse.
  a.fill_(1.5f);
  float expected = 1.5f;
  EXPECT_EQ(std::memcmp(Bytes(slab) + 14 * sizeof(float), &expected, sizeof(float)), 0);
  slab.narrow(0, 64, 8).fill_(0);
  EXPECT_EQ(b[0].item<double>(), 0.0);
  b.fill_(2.0);
  EXPECT_EQ(b.sum().item<double>(), 130.0);
  EXPECT_EQ(a.sum().item<float>(), 22.5f);  // untouched by b's writes
}

TEST(SlabChainTest, APieceKeepsItsSlabsBytesAliveAfterTheSlabTensorIsGone) {
  size_t used = 0;
  torch::Tensor piece;
  const void* slab_data = nullptr;
  {
    torch::Tensor slab = torch::empty({256}, torch::kUInt8);
    slab_data = slab.data_ptr();
    piece = CutFromSlab(slab, &used, {4}, torch::kInt);
    ASSERT_TRUE(piece.defined());
    EXPECT_EQ(slab.storage().use_count(), 2);
  }
  EXPECT_EQ(piece.data_ptr(), slab_data);
  EXPECT_EQ(piece.storage().use_count(), 1);
  EXPECT_EQ(piece.storage().nbytes(), 256u);
  piece.copy_(torch::tensor({1, 2, 3, 4}, torch::kInt));
  EXPECT_TRUE(torch::equal(piece, torch::tensor({1, 2, 3, 4}, torch::kInt)));
}

TEST(SlabChainTest, ASlabTooSmallForThePieceGivesAnUndefinedTensorAndKeepsItsOffset) {
  torch::Tensor slab = torch::empty({128}, torch::kUInt8);
  size_t used = 64;
  EXPECT_FALSE(CutFromSlab(slab, &used, {17}, torch::kFloat).defined());  // 68 bytes, 64 left
  EXPECT_EQ(used, 64u);
  EXPECT_TRUE(CutFromSlab(slab, &used, {16}, torch::kFloat).defined());  // exactly the rest
  EXPECT_EQ(used, 128u);
  EXPECT_FALSE(CutFromSlab(slab, &used, {1}, torch::kUInt8).defined());
  size_t past = 129;  // an offset past the end never cuts
  EXPECT_FALSE(CutFromSlab(slab, &past, {1}, torch::kUInt8).defined());
}

TEST(SlabChainTest, ASlabStartingOffAWholeElementCutsNoWiderPiece) {
  torch::Tensor base = torch::empty({256}, torch::kUInt8);
  torch::Tensor slab = base.narrow(0, 2, 200);  // its data starts 2 bytes in
  size_t used = 0;
  EXPECT_FALSE(CutFromSlab(slab, &used, {2}, torch::kFloat).defined());
  EXPECT_EQ(used, 0u);
  torch::Tensor half = CutFromSlab(slab, &used, {3}, torch::kHalf);
  ASSERT_TRUE(half.defined());
  EXPECT_EQ(Bytes(half), Bytes(base) + 2);
}

TEST(SlabChainTest, AChainTakesAFreshSlabWhenTheCurrentOneIsUsedUp) {
  SlabChain chain;
  int fresh_calls = 0;
  auto fresh = [&] {
    ++fresh_calls;
    return torch::empty({256}, torch::kUInt8);
  };
  torch::Tensor a = chain.Cut({32}, torch::kFloat, fresh);  // 128 bytes
  torch::Tensor b = chain.Cut({32}, torch::kFloat, fresh);  // the rest
  EXPECT_EQ(fresh_calls, 1);
  EXPECT_EQ(Bytes(b), Bytes(a) + 128);
  torch::Tensor c = chain.Cut({1}, torch::kFloat, fresh);
  EXPECT_EQ(fresh_calls, 2);
  EXPECT_NE(c.storage().data(), a.storage().data());
  EXPECT_EQ(a.storage().use_count(), 2);  // a and b; the chain moved on
}

}  // namespace
}  // namespace trainsnap::internal
