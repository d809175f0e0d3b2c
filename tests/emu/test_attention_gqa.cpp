// Grouped-query, sliding-window, query-scaled attention (Gemma 3's) on the emulated flash kernel
// (kernels/cuda/attention.cu) and mma path (attention_mma.cu) against the CPU twin
// eco::cpu::attention_forward_gqa / attention_backward_gqa, as tests/gpu/test_attention_gpu.cu
// checks them (attention_twin.h: out 5e-3 and dqkv 1e-2 in relative norm, 2e-2 per part and over
// the last 8 tokens, lse within 2e-5 of float64; poisoned outputs, guard bands). Shapes: query
// heads per kv head 1, 2 and 4; windows of 1, shorter than T and at least T; a query scalar other
// than hs; head sizes 12 / 16 / 32 / 64 / 128 and 256 (Gemma 3's:
// the flash kernel's 8-dims-per-lane instantiation, the mma path's column-sliced dkdv); odd T and
// T past one and two 64-row tiles (windows that open inside a step). The lse of each path feeds
// the other's backward; the same bits with the blocks in reverse order (a kv head's gradient sums
// its query heads in a fixed order, whatever the block order).
#include <cstdio>
#include <vector>

#include "attention_twin.h"
#include "sweep.h"

namespace {

using attn::kFlash;
using attn::kMma;
using attn::Shape;

// {B, T, NH, hs, KVH, window, q_scalar (0: hs)}. The flash kernel shuffles on every key (slow
// here): few blocks per shape by default (sweep.h); ECO_EMU_FULL=1 (label exhaustive) runs the
// longer list. Two kv heads of two query heads each (a query head's kv head is h / 2, not
// h % 2) and a window far shorter than T (query blocks past the first read one key tile, key
// blocks stop their queries before T) are in both.
const std::vector<Shape> kFlashShapes =
    emuh::full_sweep()
        ? std::vector<Shape>{{1, 17, 4, 16, 1, 5, 10.0f},  // 4 q heads per kv head, window < T
                             {1, 17, 4, 16, 2, 5, 10.0f},  // 2 kv heads of 2 q heads each
                             {2, 9, 2, 12, 2, 4},          // multi-head with a window: GQA entry
                             {1, 33, 2, 64, 1, 40},        // window >= T, 2 q heads per kv head
                             {1, 19, 2, 256, 1, 7, 256.0f},  // Gemma 3's head size
                             {1, 7, 4, 16, 1, 1},          // window 1: each query sees itself
                             {1, 50, 4, 16, 1, 18}}        // key tiles skipped both ways
        : std::vector<Shape>{{1, 9, 4, 16, 2, 5, 10.0f},  // 2 per kv head x 2, window < T, odd T
                             {1, 9, 2, 256, 1, 40},       // hs 256 (8 dims a lane), window >= T
                             {2, 5, 4, 12, 1, 1},         // 4 per kv head, window 1, 2 sequences
                             {1, 50, 2, 16, 2, 18}};      // 1 per kv head, tiles skipped
// The mma path: T 65 (one past a 64-row tile) with 2 kv heads of 2 query heads, windows opening
// inside a key step and query steps stopping before T; hs 256 at T 130 with window 50 (32-key
// forward steps and 16-row backward steps that need the window's mask away from the diagonal
// and the ragged end, two dK / dV column slices); a scalar alone (1 q head per kv head, no
// window); window 1 with 4 query heads per kv head. Full: also hs 128 at T 129, a window >= T,
// hs 256 at T 70.
const std::vector<Shape> kMmaShapes =
    emuh::full_sweep()
        ? std::vector<Shape>{{1, 65, 4, 64, 2, 20},     {2, 17, 2, 32, 2, 0, 20.0f},
                             {1, 129, 2, 128, 1, 50},   {1, 70, 2, 256, 1, 24, 256.0f},
                             {1, 33, 2, 64, 1, 100},    {1, 9, 4, 32, 1, 1},
                             {1, 130, 1, 256, 1, 50, 256.0f}, {1, 65, 4, 64, 1, 20}}
        : std::vector<Shape>{{1, 65, 4, 64, 2, 20},
                             {1, 130, 1, 256, 1, 50, 256.0f},
                             {2, 17, 2, 32, 2, 0, 20.0f},
                             {1, 9, 4, 32, 1, 1}};

TEST(EmuAttentionGqa, FlashForwardMatchesCpuTwin) {
  attn::Worst worst;
  attn::expect_forward_matches_cpu(kFlash, kFlashShapes, worst);
  std::printf("[   emu    ] flash gqa forward worst: out rel %.2e, lse %.2e\n", worst.out,
              worst.lse);
}

TEST(EmuAttentionGqa, FlashBackwardAccumulatesCpuTwinsGradient) {
  attn::Worst worst;
  attn::expect_backward_matches_cpu(kFlash, kFlash, kFlashShapes, worst);
  std::printf("[   emu    ] flash gqa backward worst: dqkv rel %.2e, gradient parts %.2e\n",
              worst.dqkv, worst.grad);
}

TEST(EmuAttentionGqa, MmaForwardMatchesCpuTwin) {
  attn::Worst worst;
  attn::expect_forward_matches_cpu(kMma, kMmaShapes, worst);
  std::printf("[   emu    ] mma gqa forward worst: out rel %.2e, lse %.2e\n", worst.out, worst.lse);
}

TEST(EmuAttentionGqa, MmaBackwardAccumulatesCpuTwinsGradient) {
  attn::Worst worst;
  attn::expect_backward_matches_cpu(kMma, kMma, kMmaShapes, worst);
  std::printf("[   emu    ] mma gqa backward worst: dqkv rel %.2e, gradient parts %.2e\n",
              worst.dqkv, worst.grad);
}

// The backend may run a forward on one path and its backward on the other: the same lse.
TEST(EmuAttentionGqa, BackwardTakesTheOtherPathsLse) {
  attn::Worst worst;
  const std::vector<Shape> shapes = {{1, emuh::full_sweep() ? 17 : 9, 4, 32, 1, 6, 20.0f}};
  attn::expect_backward_matches_cpu(kFlash, kMma, shapes, worst);
  attn::expect_backward_matches_cpu(kMma, kFlash, shapes, worst);
}

TEST(EmuAttentionGqa, ForwardAndBackwardAreTheSameInAnyBlockOrder) {
  attn::expect_deterministic(kFlash, {1, emuh::full_sweep() ? 33 : 9, 4, 16, 2, 5});
  attn::expect_deterministic(kMma, {1, 65, 4, 32, emuh::full_sweep() ? 1 : 2, 20});
}

// Shared memory of the mma path at Gemma 3's head size: forward Q (64 rows) + 2 x {K, V} (32
// rows), dq Q, dO (64) + 2 x {K, V} (16), dkdv K, V (64) + 2 x {Q, dO} (16); rows of 256 + 8
// bf16. Each exactly sm_89's 99 KiB (the smallest opt-in limit of the architectures built).
TEST(EmuAttentionGqa, MmaSharedMemoryAtHeadSize256FitsSm89) {
  emu::smem_launches.clear();
  attn::run_forward_and_backward(kMma, {1, 2, 2, 256, 1, 8});
  ASSERT_EQ(emu::smem_launches.size(), 3u);
  const size_t ld = 256 + 8;
  EXPECT_EQ(emu::smem_launches[0].bytes, 2 * (64 + 4 * 32) * ld) << "forward";
  EXPECT_EQ(emu::smem_launches[1].bytes, 2 * (2 * 64 + 4 * 16) * ld) << "dq";
  EXPECT_EQ(emu::smem_launches[2].bytes, 2 * (2 * 64 + 4 * 16) * ld) << "dkdv";
  for (const auto& l : emu::smem_launches) EXPECT_LE(l.bytes, size_t(99 * 1024)) << l.kernel;
}

// Calls the mma path cannot take are refused naming the shape (the backend then runs the flash
// kernel); the flash kernel refuses a head size above 256 and NH not a multiple of KVH.
TEST(EmuAttentionGqa, RefusesUnsupportedShapesNamingThem) {
  alignas(16) static char buf[256];
  auto* p = reinterpret_cast<__nv_bfloat16*>(buf);
  auto* f = reinterpret_cast<float*>(buf);
  std::string hs96 = "no error";
  try {
    eco::cuda::attention_mma_forward_gqa(p, f, p, 1, 4, {4, 1, 96, 8, 96.0f});
  } catch (const std::exception& e) {  // eco::Error
    hs96 = e.what();
  }
  EXPECT_NE(hs96.find("B=1 T=4 NH=4 KVH=1 hs=96 window=8 q_scalar=96: the mma path needs"),
            std::string::npos)
      << hs96;
  EXPECT_FALSE(eco::cuda::attention_mma_gqa_supported(1, 4, {4, 1, 256, 8, 256.0f}, {p, buf + 8}));
  EXPECT_TRUE(eco::cuda::attention_mma_gqa_supported(1, 4, {4, 1, 256, 8, 256.0f}, {p, p}));
  const long launches = emu::launches;
  EXPECT_EQ(eco::cuda::attention_forward_gqa(p, f, p, 1, 4, {2, 1, 288, 0, 288.0f}),
            cudaErrorInvalidValue);
  EXPECT_EQ(eco::cuda::attention_forward_gqa(p, f, p, 1, 4, {3, 2, 64, 0, 64.0f}),
            cudaErrorInvalidValue);
  EXPECT_EQ(eco::cuda::attention_backward_gqa(p, f, p, p, p, f, 1, 4, {4, 1, 64, -1, 64.0f}),
            cudaErrorInvalidValue);
  EXPECT_EQ(emu::launches, launches);
}

}  // namespace
