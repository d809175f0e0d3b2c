// The CUDA backend's attention path choice (kernels/cuda/cuda_attention.h), on the CPU: the
// ECO_CUDA_ATTENTION values and the fallback order mma -> gemm -> flash.
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "kernels/cuda/cuda_attention.h"

namespace eco {
namespace {

TEST(CudaAttentionChoice, ParsesTheFourNamesAndUnsetAsAuto) {
  EXPECT_EQ(parse_cuda_attention(nullptr), CudaAttention::Auto);
  EXPECT_EQ(parse_cuda_attention(""), CudaAttention::Auto);
  EXPECT_EQ(parse_cuda_attention("auto"), CudaAttention::Auto);
  EXPECT_EQ(parse_cuda_attention("mma"), CudaAttention::Mma);
  EXPECT_EQ(parse_cuda_attention("gemm"), CudaAttention::Gemm);
  EXPECT_EQ(parse_cuda_attention("flash"), CudaAttention::Flash);
}

TEST(CudaAttentionChoice, RejectsAnyOtherValueNamingItAndTheChoices) {
  for (const char* bad : {"MMA", "fast", "mma ", "cublas"}) {
    try {
      parse_cuda_attention(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Usage);
      EXPECT_EQ(std::string(e.what()),
                "ECO_CUDA_ATTENTION=" + std::string(bad) + ": expected auto, mma, gemm or flash");
    }
  }
}

// Auto keeps the pre-mma choice (gemm, else flash) until the mma path is GPU-verified.
TEST(CudaAttentionChoice, AutoTakesTheGemmPathElseFlash) {
  EXPECT_EQ(choose_cuda_attention(CudaAttention::Auto, true, true), CudaAttention::Gemm);
  EXPECT_EQ(choose_cuda_attention(CudaAttention::Auto, true, false), CudaAttention::Flash);
  EXPECT_EQ(choose_cuda_attention(CudaAttention::Auto, false, false), CudaAttention::Flash);
}

TEST(CudaAttentionChoice, MmaFallsBackToGemmThenFlash) {
  EXPECT_EQ(choose_cuda_attention(CudaAttention::Mma, true, true), CudaAttention::Mma);
  EXPECT_EQ(choose_cuda_attention(CudaAttention::Mma, true, false), CudaAttention::Mma);
  EXPECT_EQ(choose_cuda_attention(CudaAttention::Mma, false, true), CudaAttention::Gemm);
  EXPECT_EQ(choose_cuda_attention(CudaAttention::Mma, false, false), CudaAttention::Flash);
}

TEST(CudaAttentionChoice, GemmAndFlashRequestsNeverTakeMma) {
  EXPECT_EQ(choose_cuda_attention(CudaAttention::Gemm, true, true), CudaAttention::Gemm);
  EXPECT_EQ(choose_cuda_attention(CudaAttention::Gemm, true, false), CudaAttention::Flash);
  EXPECT_EQ(choose_cuda_attention(CudaAttention::Flash, true, true), CudaAttention::Flash);
}

// The mma path's shapes: head sizes 32, 64, 128, 256 only; grid limits on B (y) and T's 64-row
// tiles (z).
TEST(CudaAttentionChoice, MmaShapesAreTheCompiledHeadSizesWithinTheGridLimits) {
  for (int hs : {32, 64, 128, 256})
    EXPECT_TRUE(attention_mma_shape_ok(8, 1024, 12 * hs, 12)) << hs;
  for (int hs : {8, 16, 48, 80, 96, 288, 512})
    EXPECT_FALSE(attention_mma_shape_ok(8, 1024, 4 * hs, 4)) << hs;
  EXPECT_TRUE(attention_mma_shape_ok(1, 1, 64, 1));
  EXPECT_FALSE(attention_mma_shape_ok(1, 1, 65, 1));   // C % NH == 0 but hs 65
  EXPECT_FALSE(attention_mma_shape_ok(1, 1, 130, 4));  // C % NH != 0
  EXPECT_FALSE(attention_mma_shape_ok(0, 16, 64, 1));
  EXPECT_FALSE(attention_mma_shape_ok(1, 0, 64, 1));
  EXPECT_FALSE(attention_mma_shape_ok(1, 16, 64, 0));
  EXPECT_TRUE(attention_mma_shape_ok(65535, 16, 64, 1));
  EXPECT_FALSE(attention_mma_shape_ok(65536, 16, 64, 1));
  EXPECT_TRUE(attention_mma_shape_ok(1, 65535 * 64, 64, 1));
  EXPECT_FALSE(attention_mma_shape_ok(1, 65535 * 64 + 1, 64, 1));
}

// Grouped-query / windowed shapes: NH a multiple of KVH, a window >= 0, a positive query scalar,
// the same head sizes (Gemma 3 1B: 4 query heads on 1 kv head of 256, window 512).
TEST(CudaAttentionChoice, MmaTakesGroupedQueryAndWindowedShapes) {
  EXPECT_TRUE(attention_mma_shape_ok(16, 512, AttentionShape{4, 1, 256, 512, 256.0f}));
  EXPECT_TRUE(attention_mma_shape_ok(2, 100, AttentionShape{8, 2, 64, 0, 10.0f}));
  EXPECT_FALSE(attention_mma_shape_ok(2, 100, AttentionShape{6, 4, 64, 0, 64.0f}));   // NH % KVH
  EXPECT_FALSE(attention_mma_shape_ok(2, 100, AttentionShape{4, 0, 64, 0, 64.0f}));   // KVH 0
  EXPECT_FALSE(attention_mma_shape_ok(2, 100, AttentionShape{4, 2, 64, -1, 64.0f}));  // window
  EXPECT_FALSE(attention_mma_shape_ok(2, 100, AttentionShape{4, 2, 64, 8, 0.0f}));    // scalar
  EXPECT_FALSE(attention_mma_shape_ok(2, 100, AttentionShape{4, 1, 288, 8, 288.0f}));  // hs 288
}

}  // namespace
}  // namespace eco
