// The emulator's own PTX (shim/emu_ptx.h), one warp at a time, against the PTX ISA written out
// again here in its element form: mma.m16n8k16 .bf16 (9.7.14.5.8: a_i, b_i, c_i at row / col of
// groupID and threadID_in_group) against a float64 product; ldmatrix .m8n8 .x4 (.trans) against
// the rows the lanes address; cp.async's groups (data only at wait_group, zero fill); ex2.approx's
// special values and flushes; and the misuses that must abort.
#include <cmath>
#include <cstring>
#include <vector>

#include "emu_common.h"

namespace {

using emuh::bf;

uint32_t pack(uint16_t lo, uint16_t hi) { return uint32_t(lo) | uint32_t(hi) << 16; }

TEST(EmuPtx, MmaM16n8k16FollowsTheIsaFragmentLayout) {
  const std::vector<uint16_t> A = emuh::to_bf16(emuh::randn(16 * 16, 1, 1.0f));  // (m, k)
  const std::vector<uint16_t> Bm = emuh::to_bf16(emuh::randn(16 * 8, 2, 1.0f));  // (k, n)
  const std::vector<float> Cm = emuh::randn(16 * 8, 3, 1.0f);                    // (m, n)
  std::vector<float> D(16 * 8, NAN);
  emu_launch(dim3(1), dim3(32), [&] {
    const int lane = int(threadIdx.x), g = lane >> 2, t = lane % 4;
    uint16_t a[8], b[4];
    for (int i = 0; i < 8; ++i) {  // a_i: row g for i < 2 or 4 <= i < 6, else g + 8
      const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
      const int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      a[i] = A[size_t(row * 16 + col)];
    }
    for (int i = 0; i < 4; ++i) b[i] = Bm[size_t((t * 2 + (i & 1) + (i >= 2 ? 8 : 0)) * 8 + g)];
    float c[4], d[4];
    for (int i = 0; i < 4; ++i) c[i] = Cm[size_t((i < 2 ? g : g + 8) * 8 + t * 2 + (i & 1))];
    emu::ptx::mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(
        d[0], d[1], d[2], d[3], pack(a[0], a[1]), pack(a[2], a[3]), pack(a[4], a[5]),
        pack(a[6], a[7]), pack(b[0], b[1]), pack(b[2], b[3]), c[0], c[1], c[2], c[3]);
    for (int i = 0; i < 4; ++i) D[size_t((i < 2 ? g : g + 8) * 8 + t * 2 + (i & 1))] = d[i];
  });
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      double ref = Cm[size_t(m * 8 + n)], mag = std::fabs(ref);
      for (int k = 0; k < 16; ++k) {
        const double p = double(bf(A[size_t(m * 16 + k)])) * bf(Bm[size_t(k * 8 + n)]);
        ref += p;
        mag += std::fabs(p);
      }
      EXPECT_NEAR(D[size_t(m * 8 + n)], ref, 1e-6 * mag) << "row " << m << " col " << n;
    }
}

// Four 8 x 8 matrices of distinct b16 values, rows scattered through shared memory (16-byte
// aligned, in no order): lane 8i + j addresses row j of matrix i.
TEST(EmuPtx, LdmatrixX4AndTransFollowTheIsaFragmentLayout) {
  auto elem = [](int m, int r, int c) { return uint16_t(0x1000 + m * 64 + r * 8 + c); };
  auto row_offset = [](int m, int r) { return size_t(((m * 8 + r) * 13) % 32) * 32 + 16; };
  std::vector<uint32_t> got[2];
  for (int trans = 0; trans < 2; ++trans) {
    got[trans].assign(32 * 4, 0);
    emu_launch_smem(dim3(1), dim3(32), 32 * 32 + 16, [&] {
      unsigned char* smem = emu_dynamic_smem<unsigned char, 16>();
      const int lane = int(threadIdx.x);
      for (int c = 0; c < 8; ++c) {  // lane 8m + r writes row r of matrix m
        const uint16_t v = elem(lane / 8, lane % 8, c);
        std::memcpy(smem + row_offset(lane / 8, lane % 8) + 2 * c, &v, 2);
      }
      __syncthreads();
      const uint32_t addr =
          uint32_t(__cvta_generic_to_shared(smem + row_offset(lane / 8, lane % 8)));
      uint32_t* r = &got[trans][size_t(lane) * 4];
      if (trans)
        emu::ptx::ldmatrix_sync_aligned_m8n8_x4_trans_shared_b16(r[0], r[1], r[2], r[3], addr);
      else
        emu::ptx::ldmatrix_sync_aligned_m8n8_x4_shared_b16(r[0], r[1], r[2], r[3], addr);
    });
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int m = 0; m < 4; ++m) {
      const int row = lane / 4, col = 2 * (lane % 4);  // a group of 4 lanes holds a row
      EXPECT_EQ(got[0][size_t(lane * 4 + m)], pack(elem(m, row, col), elem(m, row, col + 1)))
          << "lane " << lane << " matrix " << m;
      EXPECT_EQ(got[1][size_t(lane * 4 + m)], pack(elem(m, col, row), elem(m, col + 1, row)))
          << ".trans lane " << lane << " matrix " << m;
    }
}

// Group 1: 16 bytes; group 2: 4 bytes with src-size 0 and 16 bytes with src-size 8. The
// destination reads 0xFF (in flight) until wait_group completes the copy's group.
TEST(EmuPtx, CpAsyncLandsWhenWaitGroupCompletesItsGroupAndZeroFills) {
  alignas(16) unsigned char src[32];
  for (int i = 0; i < 32; ++i) src[i] = uint8_t(i + 1);
  std::vector<unsigned char> issued, after1, after0;
  emu_launch_smem(dim3(1), dim3(1), 64, [&] {
    unsigned char* smem = emu_dynamic_smem<unsigned char, 16>();
    const uint32_t base = uint32_t(__cvta_generic_to_shared(smem));
    std::memset(smem, 0, 64);
    emu::ptx::cp_async_cg_shared_global(base, src, 16, 16);
    emu::ptx::cp_async_commit_group();
    emu::ptx::cp_async_ca_shared_global(base + 16, src + 16, 4, 0);
    emu::ptx::cp_async_cg_shared_global(base + 32, src + 16, 16, 8);
    emu::ptx::cp_async_commit_group();
    issued.assign(smem, smem + 64);
    emu::ptx::cp_async_wait_group(1);
    after1.assign(smem, smem + 64);
    emu::ptx::cp_async_wait_group(0);
    after0.assign(smem, smem + 64);
  });
  for (int i = 0; i < 64; ++i) {
    const bool copied = i < 20 || (i >= 32 && i < 48);
    const unsigned char final_value = i < 16 ? src[i] : (i >= 32 && i < 40) ? src[i - 16] : 0;
    EXPECT_EQ(issued[size_t(i)], copied ? 0xFF : 0) << "byte " << i << " at issue";
    EXPECT_EQ(after1[size_t(i)], i < 16 ? src[i] : copied ? 0xFF : 0) << "byte " << i;
    EXPECT_EQ(after0[size_t(i)], final_value) << "byte " << i << " after wait_group 0";
  }
}

TEST(EmuPtx, Ex2ApproxKeepsSpecialValuesAndFlushesSubnormals) {
  auto ex2 = [](float x) {
    float y;
    emu::ptx::ex2_approx_ftz_f32(y, x);
    return y;
  };
  EXPECT_EQ(ex2(3.0f), 8.0f);
  EXPECT_EQ(ex2(-INFINITY), 0.0f);
  EXPECT_FALSE(std::signbit(ex2(-INFINITY)));
  EXPECT_EQ(ex2(-0.0f), 1.0f);
  EXPECT_EQ(ex2(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(ex2(NAN)));
  EXPECT_EQ(ex2(-126.0f), std::ldexp(1.0f, -126));  // the smallest normal stays
  EXPECT_EQ(ex2(-126.5f), 0.0f);                    // a subnormal result flushes
  EXPECT_EQ(ex2(std::ldexp(1.0f, -140)), 1.0f);     // a subnormal input is 0
}

TEST(EmuPtxDeathTest, MisusesAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto mma_in_partial_warp = [] {
    emu_launch(dim3(1), dim3(16), [] {
      float d = 0.0f;
      emu::ptx::mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(d, d, d, d, 0, 0, 0, 0, 0, 0, d,
                                                                    d, d, d);
    });
  };
  EXPECT_DEATH(mma_in_partial_warp(), "needs all 32 lanes");
  const auto mma_after_a_lane_exited = [] {
    emu_launch(dim3(1), dim3(32), [] {
      if (threadIdx.x == 5) return;
      float d = 0.0f;
      emu::ptx::mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(d, d, d, d, 0, 0, 0, 0, 0, 0, d,
                                                                    d, d, d);
    });
  };
  EXPECT_DEATH(mma_after_a_lane_exited(), "lane 5 has exited");
  const auto past_shared = [] {
    emu_launch_smem(dim3(1), dim3(32), 256, [] {
      uint32_t r[4];
      const uint32_t addr = uint32_t(__cvta_generic_to_shared(emu_dynamic_smem<char, 16>()));
      emu::ptx::ldmatrix_sync_aligned_m8n8_x4_shared_b16(r[0], r[1], r[2], r[3],
                                                         addr + 16 * threadIdx.x);
    });
  };
  EXPECT_DEATH(past_shared(), "outside the block's 256 bytes");
  // Warp 0 copies a tile in, warp 1 reads it with no __syncthreads in between: whichever runs
  // first, the race check sees both in the same barrier phase.
  const auto tile_read_without_barrier = [] {
    emu_launch_smem(dim3(1), dim3(64), 512, [] {
      unsigned char* smem = emu_dynamic_smem<unsigned char, 16>();
      const uint32_t base = uint32_t(__cvta_generic_to_shared(smem));
      static const uint4 zeros[32] = {};
      const unsigned lane = threadIdx.x % 32;
      if (threadIdx.x < 32) {
        emu::ptx::cp_async_cg_shared_global(base + 16 * lane, &zeros[lane], 16, 16);
        emu::ptx::cp_async_wait_all();
      } else {
        uint32_t r[4];
        emu::ptx::ldmatrix_sync_aligned_m8n8_x4_shared_b16(r[0], r[1], r[2], r[3],
                                                           base + 16 * lane);
      }
    });
  };
  EXPECT_DEATH(tile_read_without_barrier(), "since the last __syncthreads");
  static int kernel_without_opt_in = 0;  // any address serves as the kernel's
  const auto over_48k = [] {
    emu_launch_dyn(dim3(1), dim3(32), 49 * 1024, "k", &kernel_without_opt_in, [] {});
  };
  EXPECT_DEATH(over_48k(), "without cudaFuncSetAttribute");
}

// The transform puts emu_check_launch_bounds(N, name) first in every kernel declared
// __launch_bounds__(N): a block above N threads, which a GPU would refuse to launch, aborts.
TEST(EmuRuntime, ABlockAboveItsKernelsLaunchBoundsAborts) {
  int ran = 0;
  emu_launch(dim3(1), dim3(32, 8), [&] {
    emu_check_launch_bounds(256, "k");
    if (threadIdx.x == 0 && threadIdx.y == 0) ran = 1;
  });
  EXPECT_EQ(ran, 1);  // at the bound: runs
  const auto above = [] {
    emu_launch(dim3(1), dim3(32, 9), [] { emu_check_launch_bounds(256, "k"); });
  };
  EXPECT_DEATH(above(), "k: a block of 288 threads, above its __launch_bounds__\\(256\\)");
}

}  // namespace
