// GPU tests of the MoE kernels (kernels/cuda/moe.cuh) against their CPU twins
// (kernels/cpu/moe.h) at the paper's shapes (N 4096 tokens, E 32 / 64, k 4 / 6, C 576) and ragged
// ones. The twin runs in fp32 on the widened bf16 inputs, each kernel gets the twin's own routing
// as input, so a difference is the kernel's own. Outputs are poisoned (0xFF) before each run.
//
// Tolerances:
//  - Exact (bit-identical): the dispatch (integer counting sort); gather (a copy); combine,
//    scatter_add and combine_backward's dy (fp32 sums in the twin's j order from 0, added to the
//    output once, one bf16 rounding; IEEE fp32 without FMA contraction on both sides); the router
//    backward of TopkSoftmax and SoftmaxTopk (the same fp32 operations in the same order, no
//    transcendental function: IEEE division and no FMA on both sides).
//  - combine_backward's dgates: the twin sums <dout, y> in channel order, the kernel per lane
//    then a butterfly; each is within (C - 1) 2^-24 sum |terms| of the exact dot, so they are
//    within 2 C 2^-24 sum |terms| of each other.
//  - moe_route: idx exact where the selection key is the logit itself (TopkSoftmax,
//    SoftmaxTopk); gates, probs, lse kF32Tol = 1e-5 norm-wise (CUDA's expf / logf are within
//    2 ulp of glibc's). SigmoidBias selects on sigmoid(z) + b through expf: a token may pick
//    differently only at a near tie (the twin's keys of both picks within 1e-5 at every
//    position, and at most 0.1% of tokens); gates are compared over the tokens that agree.
//  - SigmoidBias router backward: kF32Tol norm-wise (its sigmoid goes through expf).
//  - moe_router_sums (from the twin's probs and lse): prob and lse^2 sums within 1e-12 relative
//    (double sums in another order); the entropy sum within kF32Tol (logf per token). Two runs give
//    the same bits.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test.h"
#include "base/math/bf16.h"
#include "base/math/moe_stats.h"
#include "kernels/cpu/moe.h"
#include "kernels/cuda/moe.cuh"

namespace eco {
namespace {

using bf16 = __nv_bfloat16;
using cuda::DeviceBuffer;
using gputest::poison;
using gputest::rel_err;
using gputest::to_device;
using gputest::to_host;

constexpr double kF32Tol = 1e-5;
constexpr int kAlign = 16;  // the CUDA backend's moe_row_align (FP8 tiles)

struct MoeShape {
  int N, E, k, C;
};
const MoeShape kShapes[] = {
    {4096, 32, 4, 576}, {4096, 64, 6, 576}, {1000, 8, 2, 33}, {257, 16, 1, 72}};
constexpr MoeRouter kModes[] = {MoeRouter::TopkSoftmax, MoeRouter::SoftmaxTopk,
                                MoeRouter::SigmoidBias};

uint64_t fresh_seed() {
  static uint64_t seed = 91000;
  return seed++;
}
std::vector<float> randn(size_t n, float std = 1.0f, float mean = 0.0f) {
  auto v = gputest::randn(n, fresh_seed(), std);
  for (auto& x : v) x += mean;
  return v;
}
DeviceBuffer poisoned(size_t bytes) {
  DeviceBuffer d(bytes);
  poison(d);
  return d;
}
// int32 outputs start as 0x7f7f7f7f: 0xFF bytes read -1, a value the dispatch writes.
DeviceBuffer poisoned_ints(size_t n) {
  DeviceBuffer d(n * sizeof(int32_t));
  ECO_CHECK_CUDA(cudaMemset(d.get(), 0x7f, d.bytes()));
  return d;
}
void sync() { ECO_CHECK_CUDA(cudaDeviceSynchronize()); }
std::string tag(const MoeShape& s) {
  return "N " + std::to_string(s.N) + " E " + std::to_string(s.E) + " k " + std::to_string(s.k) +
         " C " + std::to_string(s.C);
}

// bf16 bits and the same values widened to fp32.
struct Bf16Host {
  std::vector<uint16_t> bits;
  std::vector<float> vals;
};
Bf16Host bf16_randn(size_t n) {
  const auto x = randn(n);
  Bf16Host h{std::vector<uint16_t>(n), std::vector<float>(n)};
  for (size_t i = 0; i < n; ++i) {
    h.bits[i] = float_to_bf16(x[i]);
    h.vals[i] = bf16_to_float(h.bits[i]);
  }
  return h;
}
std::vector<uint16_t> rounded(const std::vector<float>& x) {
  std::vector<uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = float_to_bf16(x[i]);
  return b;
}

// The twin's routing and dropless dispatch of one shape: the inputs every kernel test starts from.
struct Routed {
  std::vector<float> logits, bias, gates, probs, lse;
  std::vector<int32_t> idx, row_of_slot, token_of_row;  // token_of_row: max_rows, -1 past rows
  MoeDispatch d;
};
Routed twin_route(const MoeShape& s, MoeRouter mode, bool norm) {
  const size_t NE = size_t(s.N) * s.E, NK = size_t(s.N) * s.k;
  Routed r;
  r.logits = randn(NE, 1.5f);
  r.bias = randn(size_t(s.E), 0.05f);
  r.gates.resize(NK);
  r.probs.resize(NE);
  r.lse.resize(size_t(s.N));
  r.idx.resize(NK);
  r.row_of_slot.resize(NK);
  // Uneven load: later experts favoured, so some segments are much longer than others.
  for (size_t i = 0; i < NE; ++i) r.logits[i] += 0.02f * float(i % size_t(s.E));
  cpu::moe_route(r.idx.data(), r.gates.data(), r.probs.data(), r.lse.data(), r.logits.data(),
                 r.bias.data(), s.N, s.E, s.k, mode, norm);
  const int64_t S = int64_t(NK);
  r.token_of_row.assign(size_t(moe_max_rows(S, s.E, kAlign)), -1);
  r.d = cpu::moe_dispatch(r.row_of_slot.data(), r.token_of_row.data(), r.idx.data(), r.gates.data(),
                          s.N, s.E, s.k, S, kAlign);
  return r;
}

// ---- router -----------------------------------------------------------------------------------

TEST(GpuMoe, RouteMatchesCpu) {
  ECO_REQUIRE_GPU();
  for (const MoeShape& s : kShapes)
    for (MoeRouter mode : kModes)
      for (bool norm : {false, true}) {
        if (norm && mode != MoeRouter::SoftmaxTopk) continue;  // norm_topk only changes it
        const std::string what =
            tag(s) + " mode " + std::to_string(int(mode)) + " norm " + std::to_string(norm);
        const Routed r = twin_route(s, mode, norm);
        const size_t NE = size_t(s.N) * s.E, NK = size_t(s.N) * s.k;
        auto d_z = to_device(r.logits), d_b = to_device(r.bias);
        auto d_idx = poisoned_ints(NK), d_g = poisoned(NK * 4), d_p = poisoned(NE * 4),
             d_lse = poisoned(size_t(s.N) * 4);
        ECO_CHECK_CUDA(cuda::moe_route(d_idx.get<int32_t>(), d_g.get<float>(), d_p.get<float>(),
                                       d_lse.get<float>(), d_z.get<float>(), d_b.get<float>(), s.N,
                                       s.E, s.k, mode, norm));
        sync();
        const auto idx = to_host<int32_t>(d_idx, NK);
        const auto gates = to_host<float>(d_g, NK);
        EXPECT_LT(rel_err(to_host<float>(d_p, NE), r.probs), kF32Tol) << what;
        EXPECT_LT(rel_err(to_host<float>(d_lse, size_t(s.N)), r.lse), kF32Tol) << what;
        if (mode != MoeRouter::SigmoidBias) {
          EXPECT_EQ(idx, r.idx) << what;
          EXPECT_LT(rel_err(gates, r.gates), kF32Tol) << what;
          continue;
        }
        // SigmoidBias: tokens that pick differently must be near ties of the twin's keys.
        auto key = [&](int t, int32_t e) {
          const double z = r.logits[size_t(t) * s.E + size_t(e)];
          return 1.0 / (1.0 + std::exp(-z)) + r.bias[size_t(e)];
        };
        std::vector<float> g_same, ref_same;
        int differ = 0;
        for (int t = 0; t < s.N; ++t) {
          bool same = true;
          for (int j = 0; j < s.k; ++j) {
            const size_t sl = size_t(t) * s.k + size_t(j);
            if (idx[sl] == r.idx[sl]) continue;
            same = false;
            ASSERT_TRUE(idx[sl] >= 0 && idx[sl] < s.E) << what << " token " << t;
            EXPECT_NEAR(key(t, idx[sl]), key(t, r.idx[sl]), 1e-5) << what << " token " << t;
          }
          differ += !same;
          for (int j = 0; same && j < s.k; ++j) {
            g_same.push_back(gates[size_t(t) * s.k + size_t(j)]);
            ref_same.push_back(r.gates[size_t(t) * s.k + size_t(j)]);
          }
        }
        EXPECT_LE(differ, s.N / 1000) << what;
        EXPECT_LT(rel_err(g_same, ref_same), kF32Tol) << what;
      }
}

TEST(GpuMoe, RouterSumsMatchCpuInDoubleAndRepeatBitwise) {
  ECO_REQUIRE_GPU();
  for (const MoeShape& s : kShapes) {
    const Routed r = twin_route(s, MoeRouter::SoftmaxTopk, false);
    const MoeRouterSums ref = cpu::moe_router_sums(r.probs.data(), r.lse.data(), s.N, s.E);
    auto d_p = to_device(r.probs), d_lse = to_device(r.lse);
    std::vector<double> runs[2];
    for (auto& got : runs) {
      auto d_sums = poisoned(size_t(s.E + 2) * sizeof(double));
      ECO_CHECK_CUDA(cuda::moe_router_sums(d_sums.get<double>(), d_p.get<float>(),
                                           d_lse.get<float>(), s.N, s.E));
      sync();
      got = to_host<double>(d_sums, size_t(s.E) + 2);
    }
    const std::vector<double>& got = runs[0];
    for (int e = 0; e < s.E; ++e)
      EXPECT_NEAR(got[size_t(e)], ref.prob_sums[size_t(e)], 1e-12 * ref.prob_sums[size_t(e)])
          << tag(s) << " expert " << e;
    EXPECT_NEAR(got[size_t(s.E)], ref.lse_sq_sum, 1e-12 * ref.lse_sq_sum) << tag(s);
    EXPECT_NEAR(got[size_t(s.E) + 1], ref.entropy_sum, kF32Tol * ref.entropy_sum) << tag(s);
    EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(double)))
        << tag(s) << ": two runs differ";
  }
}

// Every mode's gradient, with and without the aux and z terms, into a pre-filled dlogits.
TEST(GpuMoe, RouterBackwardMatchesCpu) {
  ECO_REQUIRE_GPU();
  for (const MoeShape& s : kShapes)
    for (MoeRouter mode : kModes)
      for (int variant = 0; variant < 3; ++variant) {  // plain; aux + z; norm_topk + aux
        const bool aux = variant > 0, zloss = variant == 1, norm = variant == 2;
        const std::string what =
            tag(s) + " mode " + std::to_string(int(mode)) + " variant " + std::to_string(variant);
        const Routed r = twin_route(s, mode, norm);
        const size_t NE = size_t(s.N) * s.E, NK = size_t(s.N) * s.k;
        const auto dgates = randn(NK), dz0 = randn(NE, 0.5f), aux_w = randn(size_t(s.E), 0.1f);
        const float z_coef = zloss ? 2e-3f : 0.0f;
        auto d_dz = to_device(dz0), d_dg = to_device(dgates), d_idx = to_device(r.idx),
             d_g = to_device(r.gates), d_p = to_device(r.probs), d_z = to_device(r.logits),
             d_lse = to_device(r.lse), d_aux = to_device(aux_w);
        ECO_CHECK_CUDA(cuda::moe_router_backward(
            d_dz.get<float>(), d_dg.get<float>(), d_idx.get<int32_t>(), d_g.get<float>(),
            d_p.get<float>(), d_z.get<float>(), d_lse.get<float>(),
            aux ? d_aux.get<float>() : nullptr, z_coef, s.N, s.E, s.k, mode, norm));
        sync();
        std::vector<float> ref = dz0;
        const std::vector<double> aux_d =
            aux ? std::vector<double>(aux_w.begin(), aux_w.end()) : std::vector<double>();
        cpu::moe_router_backward(ref.data(), dgates.data(), r.idx.data(), r.gates.data(),
                                 r.probs.data(), r.logits.data(), r.lse.data(), aux_d,
                                 double(z_coef), s.N, s.E, s.k, mode, norm);
        const auto got = to_host<float>(d_dz, NE);
        if (mode == MoeRouter::SigmoidBias)
          EXPECT_LT(rel_err(got, ref), kF32Tol) << what;
        else
          EXPECT_EQ(got, ref) << what;
      }
}

// ---- dispatch ---------------------------------------------------------------------------------

// The twin's routing, then every token to one expert (k 1), at both alignments.
TEST(GpuMoe, DispatchEqualsCpuExactly) {
  ECO_REQUIRE_GPU();
  for (const MoeShape& s : kShapes)
    for (int pass = 0; pass < 3; ++pass) {
      const bool one_expert = pass == 2;
      const int align = pass == 0 ? 1 : kAlign, k = one_expert ? 1 : s.k;
      const std::string what =
          tag(s) + " align " + std::to_string(align) + (one_expert ? " one expert" : "");
      std::vector<int32_t> idx = twin_route(s, MoeRouter::TopkSoftmax, false).idx;
      if (one_expert) idx.assign(size_t(s.N), s.E - 1);
      const int64_t S = int64_t(s.N) * k, max_rows = moe_max_rows(S, s.E, align);
      std::vector<int32_t> ros(static_cast<size_t>(S)), tor(size_t(max_rows), -1);
      const std::vector<float> gates(size_t(S), 1.0f);
      const MoeDispatch d = cpu::moe_dispatch(ros.data(), tor.data(), idx.data(), gates.data(), s.N,
                                              s.E, k, S, align);
      auto d_idx = to_device(idx);
      auto d_ros = poisoned_ints(size_t(S)), d_tor = poisoned_ints(size_t(max_rows)),
           d_counts = poisoned_ints(size_t(s.E)),
           d_scratch = poisoned(size_t(cuda::moe_dispatch_scratch_ints(s.N, s.E, k)) * 4);
      ECO_CHECK_CUDA(cuda::moe_dispatch(d_ros.get<int32_t>(), d_tor.get<int32_t>(),
                                        d_counts.get<int32_t>(), d_scratch.get<int32_t>(),
                                        d_idx.get<int32_t>(), s.N, s.E, k, align));
      sync();
      EXPECT_EQ(to_host<int32_t>(d_ros, size_t(S)), ros) << what;
      EXPECT_EQ(to_host<int32_t>(d_tor, size_t(max_rows)), tor) << what;  // -1 past the rows
      EXPECT_EQ(to_host<int32_t>(d_counts, size_t(s.E)),
                std::vector<int32_t>(d.counts.begin(), d.counts.end()))
          << what;
    }
}

// ---- gather / combine / scatter_add / combine_backward ----------------------------------------

// Row data (R, C) with NaN on padding rows, which combine and scatter_add must never read; every
// 7th slot dropped (row -1) for the combine-side kernels.
struct RowsCase {
  Routed r;
  std::vector<int32_t> ros_dropped;
  int64_t R;
  Bf16Host rows;
};
RowsCase rows_case(const MoeShape& s) {
  RowsCase c{twin_route(s, MoeRouter::TopkSoftmax, false), {}, 0, {}};
  c.R = c.r.d.rows;
  c.ros_dropped = c.r.row_of_slot;
  for (size_t sl = 2; sl < c.ros_dropped.size(); sl += 7) c.ros_dropped[sl] = -1;
  c.rows = bf16_randn(size_t(c.R) * s.C);
  for (int64_t row = 0; row < c.R; ++row)
    if (c.r.token_of_row[size_t(row)] < 0)
      for (int ch = 0; ch < s.C; ++ch) {
        c.rows.bits[size_t(row * s.C + ch)] = 0x7fc0;
        c.rows.vals[size_t(row * s.C + ch)] = NAN;
      }
  return c;
}

TEST(GpuMoe, GatherCombineAndScatterAddAreBitIdenticalToCpu) {
  ECO_REQUIRE_GPU();
  for (const MoeShape& s : kShapes) {
    const RowsCase c = rows_case(s);
    const size_t NC = size_t(s.N) * s.C, RC = size_t(c.R) * s.C;
    const Bf16Host x = bf16_randn(NC);
    auto d_x = to_device(x.bits), d_tor = to_device(c.r.token_of_row), d_y = to_device(c.rows.bits),
         d_g = to_device(c.r.gates), d_ros = to_device(c.ros_dropped);
    // gather
    auto d_rows = poisoned(RC * 2);
    ECO_CHECK_CUDA(
        cuda::moe_gather(d_rows.get<bf16>(), d_x.get<bf16>(), d_tor.get<int32_t>(), c.R, s.C));
    sync();
    std::vector<float> ref(RC);
    cpu::moe_gather(ref.data(), x.vals.data(), c.r.token_of_row.data(), c.R, s.C);
    EXPECT_EQ(to_host<uint16_t>(d_rows, RC), rounded(ref)) << tag(s) << " gather";
    // combine, written and accumulated
    for (bool acc : {false, true}) {
      const Bf16Host out0 = bf16_randn(NC);
      auto d_out = acc ? to_device(out0.bits) : poisoned(NC * 2);
      ECO_CHECK_CUDA(cuda::moe_combine(d_out.get<bf16>(), d_y.get<bf16>(), d_g.get<float>(),
                                       d_ros.get<int32_t>(), s.N, s.C, s.k, acc));
      sync();
      std::vector<float> o = out0.vals;
      cpu::moe_combine(o.data(), c.rows.vals.data(), c.r.gates.data(), c.ros_dropped.data(), s.N,
                       s.C, s.k, acc);
      EXPECT_EQ(to_host<uint16_t>(d_out, NC), rounded(o)) << tag(s) << " combine acc " << acc;
    }
    // scatter_add (the rows as drows)
    const Bf16Host dx0 = bf16_randn(NC);
    auto d_dx = to_device(dx0.bits);
    ECO_CHECK_CUDA(cuda::moe_scatter_add(d_dx.get<bf16>(), d_y.get<bf16>(), d_ros.get<int32_t>(),
                                         s.N, s.C, s.k));
    sync();
    std::vector<float> dx = dx0.vals;
    cpu::moe_scatter_add(dx.data(), c.rows.vals.data(), c.ros_dropped.data(), s.N, s.C, s.k);
    EXPECT_EQ(to_host<uint16_t>(d_dx, NC), rounded(dx)) << tag(s) << " scatter_add";
  }
}

TEST(GpuMoe, CombineBackwardDyExactAndDgatesWithinReassociation) {
  ECO_REQUIRE_GPU();
  for (const MoeShape& s : kShapes) {
    const RowsCase c = rows_case(s);
    const size_t NC = size_t(s.N) * s.C, RC = size_t(c.R) * s.C, NK = size_t(s.N) * s.k;
    const Bf16Host dout = bf16_randn(NC);
    auto d_dout = to_device(dout.bits), d_y = to_device(c.rows.bits), d_g = to_device(c.r.gates),
         d_ros = to_device(c.ros_dropped);
    auto d_dy = poisoned(RC * 2), d_dg = poisoned(NK * 4);
    ECO_CHECK_CUDA(cuda::moe_combine_backward(d_dy.get<bf16>(), d_dg.get<float>(),
                                              d_dout.get<bf16>(), d_y.get<bf16>(), d_g.get<float>(),
                                              d_ros.get<int32_t>(), s.N, s.C, s.k));
    sync();
    // Rows no kept slot maps to (padding, dropped slots' rows) stay 0xFFFF on both sides.
    std::vector<float> ref_dy(RC, 0.0f), ref_dg(NK);
    cpu::moe_combine_backward(ref_dy.data(), ref_dg.data(), dout.vals.data(), c.rows.vals.data(),
                              c.r.gates.data(), c.ros_dropped.data(), s.N, s.C, s.k);
    std::vector<uint16_t> want = rounded(ref_dy);
    std::vector<char> written(size_t(c.R), 0);
    for (int32_t row : c.ros_dropped)
      if (row >= 0) written[size_t(row)] = 1;
    for (int64_t row = 0; row < c.R; ++row)
      if (!written[size_t(row)]) std::fill_n(want.begin() + row * s.C, s.C, uint16_t(0xFFFF));
    EXPECT_EQ(to_host<uint16_t>(d_dy, RC), want) << tag(s) << " dy";
    const auto dg = to_host<float>(d_dg, NK);
    const double u = std::ldexp(1.0, -24);
    int bad = 0;
    for (size_t sl = 0; sl < NK; ++sl) {
      const int32_t row = c.ros_dropped[sl];
      if (row < 0) {
        bad += dg[sl] != 0.0f;
        continue;
      }
      double mag = 0;
      for (int ch = 0; ch < s.C; ++ch)
        mag += std::fabs(double(dout.vals[sl / size_t(s.k) * s.C + size_t(ch)]) *
                         c.rows.vals[size_t(row) * s.C + size_t(ch)]);
      bad += !(std::fabs(double(dg[sl]) - ref_dg[sl]) <= 2.0 * s.C * u * mag);
    }
    EXPECT_EQ(bad, 0) << tag(s) << " dgates outside 2 C 2^-24 sum |terms|";
  }
}

}  // namespace
}  // namespace eco
