// The checks the emulated attention paths share (test_attention_flash.cpp, test_attention_mma.cpp,
// test_attention_gemm.cpp, test_attention_gqa.cpp),
// mirroring tests/gpu/test_attention_gpu.cu: the path's forward and backward against the CPU twin
// eco::cpu::attention_forward_gqa / attention_backward_gqa<float> (multi-head attention being its
// case KVH = NH, window 0, q_scalar = hs) run on the same bf16-rounded inputs.
// Tolerances (as the GPU test, which explains them): out 5e-3 and dqkv 1e-2 in relative norm,
// 2e-2 per part (q, k, v) and over the last 8 tokens; lse within 2e-5 of float64. Outputs and
// scratch start poisoned (NaN) inside 0xFF guard bands that must survive.
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/rel_err.h"
#include "emu_common.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_gemm.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"
#include "tests/gpu/attention_shape.h"

namespace attn {

using bf16 = __nv_bfloat16;
using emuh::bf16p;
using emuh::Guarded;

using Shape = AttnShape;  // tests/gpu/attention_shape.h, as the GPU test

// One implementation of the attention.cuh contract (emulated; synchronous).
struct Path {
  const char* name;
  std::function<void(bf16* out, float* lse, const bf16* qkv, const Shape&)> forward;
  std::function<void(bf16* dqkv, float* D, const bf16* dout, const bf16* qkv, const bf16* out,
                     const float* lse, const Shape&)>
      backward;
};

// The flash kernel (attention.cuh) and the mma path (attention_mma.cuh): a plain shape through the
// multi-head entry points (over C, NH), any other through the grouped-query ones.
inline const Path kFlash{
    "flash",
    [](bf16* out, float* lse, const bf16* qkv, const Shape& s) {
      ASSERT_EQ(s.plain() ? eco::cuda::attention_forward(out, lse, qkv, s.B, s.T, s.C(), s.NH)
                          : eco::cuda::attention_forward_gqa(out, lse, qkv, s.B, s.T,
                                                             s.attention()),
                cudaSuccess);
    },
    [](bf16* dqkv, float* D, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
       const Shape& s) {
      ASSERT_EQ(s.plain() ? eco::cuda::attention_backward(dqkv, D, dout, qkv, out, lse, s.B, s.T,
                                                          s.C(), s.NH)
                          : eco::cuda::attention_backward_gqa(dqkv, D, dout, qkv, out, lse, s.B,
                                                              s.T, s.attention()),
                cudaSuccess);
    }};
inline const Path kMma{
    "mma",
    [](bf16* out, float* lse, const bf16* qkv, const Shape& s) {
      if (s.plain())
        eco::cuda::attention_mma_forward(out, lse, qkv, s.B, s.T, s.C(), s.NH);
      else
        eco::cuda::attention_mma_forward_gqa(out, lse, qkv, s.B, s.T, s.attention());
    },
    [](bf16* dqkv, float* D, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
       const Shape& s) {
      if (s.plain())
        eco::cuda::attention_mma_backward(dqkv, D, dout, qkv, out, lse, s.B, s.T, s.C(), s.NH);
      else
        eco::cuda::attention_mma_backward_gqa(dqkv, D, dout, qkv, out, lse, s.B, s.T,
                                              s.attention());
    }};

// The GEMM path (attention_gemm.cuh): cuBLASLt strided batched GEMMs (the emulated cuBLASLt,
// shim/cublasLt.h) around the row kernels, on one engine, with a scratch poisoned (NaN) before
// every call so that a read of anything the call did not write shows.
inline eco::cuda::GemmEngine& gemm_engine() {
  static eco::cuda::GemmEngine engine;
  return engine;
}
inline eco::cuda::DeviceBuffer poisoned_scratch(const Shape& s) {
  eco::cuda::DeviceBuffer b(eco::cuda::attention_gemm_scratch_bytes(s.T, s.NH));
  std::memset(b.get(), 0xFF, b.bytes());
  return b;
}
inline const Path kGemm{
    "gemm",
    [](bf16* out, float* lse, const bf16* qkv, const Shape& s) {
      auto scratch = poisoned_scratch(s);
      eco::cuda::attention_gemm_forward(gemm_engine(), out, lse, qkv, scratch.get(),
                                        scratch.bytes(), s.B, s.T, s.C(), s.NH);
    },
    [](bf16* dqkv, float* D, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
       const Shape& s) {
      auto scratch = poisoned_scratch(s);
      eco::cuda::attention_gemm_backward(gemm_engine(), dqkv, D, scratch.get(), scratch.bytes(),
                                         dout, qkv, out, lse, s.B, s.T, s.C(), s.NH);
    }};

// Normals rounded to bf16: the bits for the kernel, their exact values for the CPU twin.
struct Bf16Data {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};
inline Bf16Data random_bf16(size_t n, uint64_t seed, float sd) {
  Bf16Data d{emuh::to_bf16(emuh::randn(n, seed, sd)), std::vector<float>(n)};
  for (size_t i = 0; i < n; ++i) d.values[i] = emuh::bf(d.bits[i]);
  return d;
}
inline std::vector<float> values(const std::vector<uint16_t>& bits) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = emuh::bf(bits[i]);
  return v;
}

using eco::rel_err;  // src/core/rel_err.h

// lse[b, h, t] = log sum over the keys u query t sees of exp(q_t . k_u q_scalar^-1/2), in
// float64 (query head h reads kv head h / (NH / KVH)).
inline std::vector<double> reference_lse(const std::vector<float>& qkv, const Shape& s) {
  const eco::AttentionShape a = s.attention();
  const size_t ld = size_t(s.qkv_width());
  std::vector<double> lse(s.n_lse()), sc;
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t) {
        const float* q = &qkv[(size_t(b) * s.T + t) * ld + size_t(a.q_col(h))];
        const int u0 = eco::attention_first_key(t, a.window);
        sc.assign(size_t(t - u0) + 1, 0.0);
        double mx = -INFINITY, sum = 0;
        for (int u = u0; u <= t; ++u) {
          const float* k = &qkv[(size_t(b) * s.T + u) * ld + size_t(a.k_col(h / a.group()))];
          double dot = 0;
          for (int d = 0; d < s.hs; ++d) dot += double(q[d]) * k[d];
          sc[size_t(u - u0)] = dot / std::sqrt(double(a.q_scalar));
          mx = std::max(mx, sc[size_t(u - u0)]);
        }
        for (double x : sc) sum += std::exp(x - mx);
        lse[(size_t(b) * s.NH + h) * s.T + t] = mx + std::log(sum);
      }
  return lse;
}

// The CPU twin's forward (out, probabilities) and backward (dqkv +=) for the shape.
inline void cpu_forward(float* out, float* att, const float* qkv, const Shape& s) {
  const eco::AttentionShape a = s.attention();
  eco::cpu::attention_forward_gqa(out, att, qkv, s.B, s.T, a.NH, a.KVH, a.hd, a.window,
                                  a.q_scalar);
}
inline void cpu_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                         const float* att, const Shape& s) {
  const eco::AttentionShape a = s.attention();
  eco::cpu::attention_backward_gqa(dqkv, scratch, dout, qkv, att, s.B, s.T, a.NH, a.KVH, a.hd,
                                   a.window, a.q_scalar);
}

// The worst errors seen, printed for the record (how far inside its tolerance each check passes).
struct Worst {
  double out = 0, lse = 0, dqkv = 0, grad = 0;
};

// out (5e-3 of the CPU twin) and lse (2e-5 of float64), both poisoned first.
inline void expect_forward_matches_cpu(const Path& path, const std::vector<Shape>& shapes,
                                       Worst& worst) {
  for (const Shape& s : shapes) {
    SCOPED_TRACE(std::string(path.name) + " " + s.str());
    const Bf16Data qkv = random_bf16(s.n_qkv(), 100 + s.T + s.hs, 1.0f);
    std::vector<float> ref(s.n_out()), att(s.n_att());
    cpu_forward(ref.data(), att.data(), qkv.values.data(), s);
    Guarded<uint16_t> d_qkv(qkv.bits), d_out(s.n_out());
    Guarded<float> d_lse(s.n_lse());
    path.forward(bf16p(d_out), d_lse.data(), bf16p(d_qkv), s);
    const double e = rel_err(values(d_out.host()), ref);
    const std::vector<float> lse = d_lse.host();
    const std::vector<double> lse_ref = reference_lse(qkv.values, s);
    double e_lse = 0;
    for (size_t i = 0; i < lse.size(); ++i)
      e_lse = std::max(e_lse, std::isfinite(lse[i]) ? std::fabs(lse[i] - lse_ref[i]) : INFINITY);
    std::printf("[   emu    ] %s forward %s: out rel %.2e, lse max abs %.2e\n", path.name,
                s.str().c_str(), e, e_lse);
    worst.out = std::max(worst.out, e);
    worst.lse = std::max(worst.lse, e_lse);
    EXPECT_LT(e, 5e-3);
    EXPECT_LE(e_lse, 2e-5);
    EXPECT_TRUE(d_out.guards_intact() && d_lse.guards_intact() && d_qkv.host() == qkv.bits);
  }
}

// fwd's out and lse, then bwd's gradient accumulated into a non-zero dqkv, against the CPU twin:
// 1e-2 on dqkv and on the gradient alone (dqkv minus its start), 2e-2 per part and over the last
// 8 tokens (the ragged tile, where a missed key or a wrong mask would be diluted in the whole).
inline void expect_backward_matches_cpu(const Path& fwd, const Path& bwd,
                                        const std::vector<Shape>& shapes, Worst& worst) {
  for (const Shape& s : shapes) {
    SCOPED_TRACE(std::string(fwd.name) + " forward, " + bwd.name + " backward, " + s.str());
    const size_t n = s.n_qkv();
    const Bf16Data qkv = random_bf16(n, 200 + s.T + s.hs, 1.0f);
    const Bf16Data dout = random_bf16(s.n_out(), 300 + s.T + s.hs, 1.0f);
    const Bf16Data dqkv0 = random_bf16(n, 400 + s.T + s.hs, 0.05f);  // backward accumulates
    Guarded<uint16_t> d_qkv(qkv.bits), d_dout(dout.bits), d_out(s.n_out()), d_dqkv(dqkv0.bits);
    Guarded<float> d_lse(s.n_lse()), d_D(s.n_lse());
    fwd.forward(bf16p(d_out), d_lse.data(), bf16p(d_qkv), s);
    const std::vector<uint16_t> out_bits = d_out.host();
    const std::vector<float> lse_bits = d_lse.host();

    std::vector<float> out(s.n_out()), att(s.n_att()), scratch(att.size()),
        ref = dqkv0.values;
    cpu_forward(out.data(), att.data(), qkv.values.data(), s);
    cpu_backward(ref.data(), scratch.data(), dout.values.data(), qkv.values.data(), att.data(), s);

    bwd.backward(bf16p(d_dqkv), d_D.data(), bf16p(d_dout), bf16p(d_qkv), bf16p(d_out), d_lse.data(),
                 s);
    const std::vector<float> got = values(d_dqkv.host());
    std::vector<float> g_got(n), g_ref(n);
    for (size_t i = 0; i < n; ++i) {
      g_got[i] = got[i] - dqkv0.values[i];
      g_ref[i] = ref[i] - dqkv0.values[i];
    }
    const double e = rel_err(got, ref), e_grad = rel_err(g_got, g_ref);
    const int ld = s.qkv_width();
    const auto select = [&](auto keep) {
      std::vector<float> a, b;
      for (int bi = 0; bi < s.B; ++bi)
        for (int t = 0; t < s.T; ++t)
          for (int j = 0; j < ld; ++j)
            if (keep(t, j)) {
              const size_t i = (size_t(bi) * s.T + t) * ld + size_t(j);
              a.push_back(g_got[i]);
              b.push_back(g_ref[i]);
            }
      return rel_err(a, b);
    };
    // The part (q 0, k 1, v 2) of column j of a qkv row.
    const auto part_of = [&](int j) {
      return j < s.C() ? 0 : j < (s.NH + s.kv_heads()) * s.hs ? 1 : 2;
    };
    double e_part[3];
    for (int part = 0; part < 3; ++part)
      e_part[part] = select([&](int, int j) { return part_of(j) == part; });
    const double e_tail = select([&](int t, int) { return t >= s.T - 8; });
    std::printf(
        "[   emu    ] %s -> %s backward %s: dqkv rel %.2e, gradient %.2e (q %.2e k %.2e "
        "v %.2e, last 8 tokens %.2e)\n",
        fwd.name, bwd.name, s.str().c_str(), e, e_grad, e_part[0], e_part[1], e_part[2], e_tail);
    worst.dqkv = std::max(worst.dqkv, e);
    worst.grad = std::max({worst.grad, e_grad, e_part[0], e_part[1], e_part[2], e_tail});
    EXPECT_LT(e, 1e-2);
    EXPECT_LT(e_grad, 1e-2);
    for (int part = 0; part < 3; ++part)
      EXPECT_LT(e_part[part], 2e-2) << "part "
                                    << "qkv"[part];
    EXPECT_LT(e_tail, 2e-2) << "last 8 tokens";
    EXPECT_TRUE(d_dqkv.guards_intact() && d_D.guards_intact());
    EXPECT_TRUE(d_qkv.host() == qkv.bits && d_dout.host() == dout.bits &&
                d_out.host() == out_bits && emuh::differ(d_lse.host(), lse_bits) == 0)
        << "backward changed an input";
  }
}

// Forward and backward once on random inputs (for what the launches record).
inline void run_forward_and_backward(const Path& path, const Shape& s) {
  const Bf16Data qkv = random_bf16(s.n_qkv(), 601, 1.0f), dout = random_bf16(s.n_out(), 602, 1.0f);
  Guarded<uint16_t> d_qkv(qkv.bits), d_dout(dout.bits), d_out(s.n_out()), d_dqkv(s.n_qkv());
  Guarded<float> d_lse(s.n_lse()), d_D(s.n_lse());
  path.forward(bf16p(d_out), d_lse.data(), bf16p(d_qkv), s);
  path.backward(bf16p(d_dqkv), d_D.data(), bf16p(d_dout), bf16p(d_qkv), bf16p(d_out), d_lse.data(),
                s);
}

// Forward + backward twice, the second time with the blocks in reverse order: the same bits (out,
// lse, dqkv): no dependence on block order, no race, no read of anything unwritten.
inline void expect_deterministic(const Path& path, const Shape& s) {
  SCOPED_TRACE(std::string(path.name) + " " + s.str());
  const Bf16Data qkv = random_bf16(s.n_qkv(), 501, 1.0f), dout = random_bf16(s.n_out(), 502, 1.0f),
                 dqkv0 = random_bf16(s.n_qkv(), 503, 0.05f);
  std::vector<uint16_t> outs[2], grads[2];
  std::vector<float> lses[2];
  for (int run = 0; run < 2; ++run) {
    Guarded<uint16_t> d_qkv(qkv.bits), d_dout(dout.bits), d_out(s.n_out()), d_dqkv(dqkv0.bits);
    Guarded<float> d_lse(s.n_lse()), d_D(s.n_lse());
    emu::reverse_blocks = run == 1;
    path.forward(bf16p(d_out), d_lse.data(), bf16p(d_qkv), s);
    path.backward(bf16p(d_dqkv), d_D.data(), bf16p(d_dout), bf16p(d_qkv), bf16p(d_out),
                  d_lse.data(), s);
    emu::reverse_blocks = false;
    outs[run] = d_out.host();
    lses[run] = d_lse.host();
    grads[run] = d_dqkv.host();
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(emuh::differ(lses[0], lses[1]), 0);
  EXPECT_EQ(grads[0], grads[1]);
}

}  // namespace attn
