// kernels/cuda/attention_mma.cu (emulated: dynamic shared memory, cp.async, ldmatrix, mma.sync,
// ex2.approx, shim/emu_ptx.h): the FlashAttention-2 style tensor-core kernels against the CPU
// twin, as tests/gpu/test_attention_gpu.cu checks them (attention_twin.h: tolerances, poisoned
// outputs, guard bands). Every compiled head size (32, 64, 128; 128 streams the backward in
// 32-row steps, so its diagonal spans two steps), ragged T (1; 17: one past a warp's 16 rows; 64:
// one whole tile; 65 and 100: a ragged second tile; 129: one past 2 tiles, 257 with
// ECO_EMU_FULL=1: one past 4); lse exchanged with
// the flash kernel both ways; the same bits with the blocks in reverse order; shared memory per
// head size.
#include <cstdio>
#include <vector>

#include "attention_twin.h"
#include "sweep.h"

namespace {

using attn::kFlash;
using attn::kMma;
using attn::Shape;

// By default (sweep.h) T 129 (one past 2 tiles: 3 key steps through the double buffer, 5 query
// steps of 32 in dkdv) stands for 257, whose 5 tiles cost half the test; ECO_EMU_FULL=1 (label
// exhaustive) runs 257.
const std::vector<Shape> kShapes = {{1, 1, 1, 128}, {2, 17, 2, 32},  {1, 64, 1, 64},
                                    {2, 65, 1, 32}, {1, 100, 2, 64},
                                    {1, emuh::full_sweep() ? 257 : 129, 1, 128}};

TEST(EmuAttentionMma, ForwardMatchesCpuTwin) {
  attn::Worst worst;
  attn::expect_forward_matches_cpu(kMma, kShapes, worst);
  std::printf("[   emu    ] mma forward worst: out rel %.2e, lse %.2e\n", worst.out, worst.lse);
}

TEST(EmuAttentionMma, BackwardAccumulatesCpuTwinsGradient) {
  attn::Worst worst;
  attn::expect_backward_matches_cpu(kMma, kMma, kShapes, worst);
  std::printf("[   emu    ] mma backward worst: dqkv rel %.2e, gradient parts %.2e\n", worst.dqkv,
              worst.grad);
}

// The backend may run a forward on one path and its backward on another: the same lse.
TEST(EmuAttentionMma, BackwardTakesTheFlashKernelsLseAndViceVersa) {
  attn::Worst worst;
  const std::vector<Shape> shapes = {{1, emuh::full_sweep() ? 33 : 17, 2, 64}};
  attn::expect_backward_matches_cpu(kFlash, kMma, shapes, worst);
  attn::expect_backward_matches_cpu(kMma, kFlash, shapes, worst);
}

TEST(EmuAttentionMma, ForwardAndBackwardAreTheSameInAnyBlockOrder) {
  attn::expect_deterministic(kMma, {emuh::full_sweep() ? 2 : 1, 130, 1, 64});
  attn::expect_deterministic(kMma, {1, 65, 1, 128});
}

// Shared memory (bf16 rows padded to hs + 8): forward Q (64 rows) + 2 x {K, V} (64 rows each);
// dq Q, dO (64) + 2 x {K, V} (step rows: 64, 32 at hs 128); dkdv K, V + 2 x {Q, dO} (lse and D
// are read from global memory). Within sm_90's 227 KiB, and (the launch aborts otherwise) opted
// in above 48 KiB. (hs 256: test_attention_gqa.cpp.)
TEST(EmuAttentionMma, SharedMemoryPerHeadSizeFitsSm90AndIsOptedInAbove48KiB) {
  for (int hs : {32, 64, 128}) {
    emu::smem_launches.clear();
    attn::run_forward_and_backward(kMma, {1, 2, 1, hs});
    ASSERT_EQ(emu::smem_launches.size(), 3u);
    const size_t ld = size_t(hs + 8), step = hs <= 64 ? 64 : 32;
    const size_t f = 2 * (64 + 4 * 64) * ld, dq = 2 * (2 * 64 + 4 * step) * ld, dkdv = dq;
    EXPECT_EQ(emu::smem_launches[0].bytes, f) << "forward, hs " << hs;
    EXPECT_EQ(emu::smem_launches[1].bytes, dq) << "dq, hs " << hs;
    EXPECT_EQ(emu::smem_launches[2].bytes, dkdv) << "dkdv, hs " << hs;
    for (const auto& l : emu::smem_launches) EXPECT_LE(l.bytes, emu::kMaxDynamicSmem);
    std::printf("[   emu    ] mma hs %d dynamic shared memory: forward %zu, dq %zu, dkdv %zu\n", hs,
                f, dq, dkdv);
  }
}

}  // namespace
