// The CUDA backend's attention path choice (kernels/common/cuda_attention.h), on the CPU: the
// ECO_CUDA_ATTENTION values and the fallback order mma -> gemm -> flash.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "kernels/common/cuda_attention.h"

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

}  // namespace
}  // namespace eco
