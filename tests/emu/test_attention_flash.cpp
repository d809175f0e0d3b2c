// kernels/cuda/attention.cu (emulated; dynamic shared memory): the fp32 flash kernels against the
// CPU twin, as tests/gpu/test_attention_gpu.cu checks them (attention_twin.h: tolerances, poisoned
// outputs, guard bands): ragged T (1, 7, 9, 17 and 33: one past a 16-row and a 32-key tile), head
// sizes 12, 16, 64, 100 and the limit 128 (whose backward needs more than 48 KiB of shared memory,
// hence the opt-in); the same bits with the blocks in reverse order.
#include <cstdio>
#include <vector>

#include "attention_twin.h"
#include "sweep.h"

namespace {

using attn::kFlash;
using attn::Shape;

// (One block per 16 queries and head: the flash kernels shuffle on every key, which the emulator
// runs slowly, hence few blocks per shape.) By default (sweep.h) each head size and ragged edge
// once at its fewest blocks: several sequences and heads at hs 12, T 33 (one past a key tile) at
// 64, T 17 (one past a row tile) at 128, hs 100 in one partial block; ECO_EMU_FULL=1 (label
// exhaustive) runs the longer list.
const std::vector<Shape> kShapes =
    emuh::full_sweep()
        ? std::vector<Shape>{{1, 1, 1, 16},   {2, 7, 2, 16},  {1, 33, 1, 64},
                             {1, 17, 1, 128}, {1, 20, 1, 12}, {1, 18, 1, 100}}
        : std::vector<Shape>{{1, 1, 1, 16}, {2, 7, 2, 12}, {1, 33, 1, 64}, {1, 17, 1, 128},
                             {1, 9, 1, 100}};

TEST(EmuAttentionFlash, ForwardMatchesCpuTwin) {
  attn::Worst worst;
  attn::expect_forward_matches_cpu(kFlash, kShapes, worst);
  std::printf("[   emu    ] flash forward worst: out rel %.2e, lse %.2e\n", worst.out, worst.lse);
}

TEST(EmuAttentionFlash, BackwardAccumulatesCpuTwinsGradient) {
  attn::Worst worst;
  attn::expect_backward_matches_cpu(kFlash, kFlash, kShapes, worst);
  std::printf("[   emu    ] flash backward worst: dqkv rel %.2e, gradient parts %.2e\n", worst.dqkv,
              worst.grad);
}

TEST(EmuAttentionFlash, ForwardAndBackwardAreTheSameInAnyBlockOrder) {
  attn::expect_deterministic(kFlash, {1, 33, emuh::full_sweep() ? 2 : 1, 32});
}

// Shared memory (fp32 tiles, rows of hs or hs + 1): forward 16 q + 32 k + 32 v rows, backward dq
// 2 x 16 + 2 x 32 rows, dkdv that + 64 floats of lse and D. hs 128's backward tops 48 KiB: the
// host opts in (the emulated launch aborts otherwise).
TEST(EmuAttentionFlash, SharedMemoryPerHeadSizeIsOptedInAbove48KiB) {
  for (int hs : {16, 64, 128}) {
    emu::smem_launches.clear();
    attn::run_forward_and_backward(kFlash, {1, 3, 1, hs});
    ASSERT_EQ(emu::smem_launches.size(), 3u);
    const size_t f = 4u * size_t(16 * hs + 32 * (hs + 1) + 32 * hs);
    const size_t dq = 4u * size_t(2 * 16 * hs + 2 * 32 * (hs + 1)), dkdv = dq + 4 * 64;
    EXPECT_EQ(emu::smem_launches[0].bytes, f) << "forward, hs " << hs;
    EXPECT_EQ(emu::smem_launches[1].bytes, dq) << "dq, hs " << hs;
    EXPECT_EQ(emu::smem_launches[2].bytes, dkdv) << "dkdv, hs " << hs;
    std::printf("[   emu    ] flash hs %d dynamic shared memory: forward %zu, dq %zu, dkdv %zu\n",
                hs, f, dq, dkdv);
  }
}

}  // namespace
