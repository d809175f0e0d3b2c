// kernels/cuda/attention_gemm.cu (emulated): the row kernels of the tensor-core attention path
// (the whole path with its cuBLASLt GEMMs: test_attention_gemm_path.cpp) against host references,
// on (NH, T, ld) score matrices with T = 1, 7 (ld 8 and 16), 130 and 257 (past one and two of the
// kernels' 128-column steps). Scores past the diagonal and in the row padding are NaN: the
// kernels must mask them by index (they read up to 3 columns past t).
//  - attention_causal_softmax: lse within 2e-5 of float64 (as the GPU test's lse); P within bf16
//    rounding (2^-8 relative) of exp(S - lse) in float64 for j <= t, exactly 0 for t < j < T.
//  - attention_causal_probs from that lse: the softmax's P bit for bit (backward's recompute).
//  - attention_softmax_backward: dS = bf16(P * (dP - D)) in fp32 bit for bit, zeros past t.
//  - attention_rowdot: D within 1e-6 * sum |dout * out| of float64, at any alignment.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "emu_common.h"
#include "kernels/cuda/attention_gemm.cuh"

namespace {

using namespace emuh;
using bf16 = __nv_bfloat16;
namespace ec = eco::cuda;

struct Rows {
  int NH, T;
  int64_t ld;
  std::string str() const {  // (snprintf: "NH" + std::to_string trips g++ 12's -Wrestrict)
    char buf[64];
    std::snprintf(buf, sizeof buf, "NH%d T%d ld%lld", NH, T, static_cast<long long>(ld));
    return buf;
  }
  size_t n() const { return size_t(NH) * size_t(T) * size_t(ld); }
};
const std::vector<Rows> kRows = {{1, 1, 8}, {2, 7, 8}, {1, 7, 16}, {2, 130, 136}, {1, 257, 264}};

// S (NH, T, ld): normals (sd 2) for j <= t, NaN past the diagonal and in the padding.
std::vector<float> causal_scores(const Rows& r, uint64_t seed) {
  std::vector<float> S = randn(r.n(), seed, 2.0f);
  for (size_t row = 0; row < size_t(r.NH) * size_t(r.T); ++row)
    for (int64_t j = int64_t(row % size_t(r.T)) + 1; j < r.ld; ++j)
      S[row * size_t(r.ld) + size_t(j)] = NAN;
  return S;
}

// The softmax and its recompute: P (bf16) and lse of each causal row.
struct Softmax {
  std::vector<uint16_t> P;
  std::vector<float> lse;
};
Softmax run_softmax(const Rows& r, const std::vector<float>& S) {
  Guarded<float> d_S(S), d_lse(size_t(r.NH) * size_t(r.T));
  Guarded<uint16_t> d_P(r.n());
  EXPECT_EQ(ec::attention_causal_softmax(bf16p(d_P), d_lse.data(), d_S.data(), r.NH, r.T, r.ld),
            cudaSuccess);
  EXPECT_TRUE(d_P.guards_intact() && d_lse.guards_intact());
  return {d_P.host(), d_lse.host()};
}

TEST(EmuAttentionGemmRows, CausalSoftmaxMatchesFloat64AndMasksByIndex) {
  for (const Rows& r : kRows) {
    SCOPED_TRACE(r.str());
    const std::vector<float> S = causal_scores(r, 1);
    const Softmax sm = run_softmax(r, S);
    double worst_lse = 0, worst_p = 0;
    long bad_zero = 0;
    for (size_t row = 0; row < size_t(r.NH) * size_t(r.T); ++row) {
      const int t = int(row % size_t(r.T));
      const float* s = &S[row * size_t(r.ld)];
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j <= t; ++j) mx = std::max(mx, double(s[j]));
      for (int j = 0; j <= t; ++j) sum += std::exp(s[j] - mx);
      const double lse = mx + std::log(sum);
      worst_lse =
          std::max(worst_lse, std::isfinite(sm.lse[row]) ? std::fabs(sm.lse[row] - lse) : INFINITY);
      for (int j = 0; j < r.T; ++j) {
        const uint16_t p = sm.P[row * size_t(r.ld) + size_t(j)];
        if (j > t) {
          bad_zero += p != 0;
          continue;
        }
        const double ref = std::exp(s[j] - lse), e = std::fabs(bf(p) - ref) / ref;
        worst_p = std::max(worst_p, std::isfinite(bf(p)) ? e : INFINITY);
      }
    }
    EXPECT_LE(worst_lse, 2e-5);
    EXPECT_LE(worst_p, 1.0 / 256 * (1 + 1e-4)) << "P relative error";
    EXPECT_EQ(bad_zero, 0) << "P past the diagonal not 0";
  }
}

TEST(EmuAttentionGemmRows, ProbabilitiesFromTheSavedLseAreTheSoftmaxsBits) {
  for (const Rows& r : kRows) {
    SCOPED_TRACE(r.str());
    const std::vector<float> S = causal_scores(r, 2);
    const Softmax sm = run_softmax(r, S);
    Guarded<float> d_S(S), d_lse(sm.lse);
    Guarded<uint16_t> d_P(r.n());
    ASSERT_EQ(ec::attention_causal_probs(bf16p(d_P), d_S.data(), d_lse.data(), r.NH, r.T, r.ld),
              cudaSuccess);
    const std::vector<uint16_t> P = d_P.host();
    long differ_bits = 0;
    for (size_t row = 0; row < size_t(r.NH) * size_t(r.T); ++row)
      for (int j = 0; j < r.T; ++j)
        differ_bits += P[row * size_t(r.ld) + size_t(j)] != sm.P[row * size_t(r.ld) + size_t(j)];
    EXPECT_EQ(differ_bits, 0);
    EXPECT_TRUE(d_P.guards_intact() && d_lse.host() == sm.lse);
  }
}

// In place over the softmax's P; dP NaN past the diagonal (masked by index).
TEST(EmuAttentionGemmRows, SoftmaxBackwardIsPTimesDpMinusDBitForBit) {
  for (const Rows& r : kRows) {
    SCOPED_TRACE(r.str());
    const Softmax sm = run_softmax(r, causal_scores(r, 3));
    const std::vector<float> dP = causal_scores(r, 4),
                             D = randn(size_t(r.NH) * size_t(r.T), 5, 1.0f);
    Guarded<uint16_t> d_P(sm.P);
    Guarded<float> d_dP(dP), d_D(D);
    ASSERT_EQ(ec::attention_softmax_backward(bf16p(d_P), d_dP.data(), d_D.data(), r.NH, r.T, r.ld),
              cudaSuccess);
    const std::vector<uint16_t> dS = d_P.host();
    long bad = 0;
    for (size_t row = 0; row < size_t(r.NH) * size_t(r.T); ++row) {
      const int t = int(row % size_t(r.T));
      for (int j = 0; j < r.T; ++j) {
        const size_t i = row * size_t(r.ld) + size_t(j);
        const uint16_t want = j <= t ? eco::float_to_bf16(bf(sm.P[i]) * (dP[i] - D[row])) : 0;
        bad += dS[i] != want;
      }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_TRUE(d_P.guards_intact());
  }
}

TEST(EmuAttentionGemmRows, RowdotMatchesFloat64AtAnyAlignment) {
  struct Case {
    int B, T, C, NH;
    size_t misalign;  // bytes
  };
  for (const Case& c : {Case{2, 5, 96, 3, 0}, Case{1, 3, 40, 2, 2}, Case{1, 4, 300, 2, 6}}) {
    char tag[64];
    std::snprintf(tag, sizeof tag, "B%d T%d C%d NH%d misaligned %zu", c.B, c.T, c.C, c.NH,
                  c.misalign);
    SCOPED_TRACE(tag);
    const size_t n = size_t(c.B) * size_t(c.T) * size_t(c.C);
    const std::vector<uint16_t> dout = to_bf16(randn(n, 6, 1.0f)), out = to_bf16(randn(n, 7, 1.0f));
    Guarded<uint16_t> d_dout(dout, c.misalign), d_out(out, c.misalign);
    Guarded<float> d_D(size_t(c.B) * size_t(c.NH) * size_t(c.T), c.misalign);
    ASSERT_EQ(ec::attention_rowdot(d_D.data(), bf16p(d_dout), bf16p(d_out), c.B, c.T, c.C, c.NH),
              cudaSuccess);
    const std::vector<float> D = d_D.host();
    const int hs = c.C / c.NH;
    for (int b = 0; b < c.B; ++b)
      for (int h = 0; h < c.NH; ++h)
        for (int t = 0; t < c.T; ++t) {
          double ref = 0, mag = 0;
          for (int d = 0; d < hs; ++d) {
            const size_t i =
                (size_t(b) * size_t(c.T) + size_t(t)) * size_t(c.C) + size_t(h * hs + d);
            ref += double(bf(dout[i])) * bf(out[i]);
            mag += std::fabs(double(bf(dout[i])) * bf(out[i]));
          }
          EXPECT_NEAR(D[(size_t(b) * size_t(c.NH) + size_t(h)) * size_t(c.T) + size_t(t)], ref,
                      1e-6 * mag)
              << "b " << b << " h " << h << " t " << t;
        }
    EXPECT_TRUE(d_D.guards_intact());
  }
}

TEST(EmuAttentionGemmRows, RejectsRaggedStridesMisalignedMatricesAndNullStatistics) {
  Guarded<float> S(size_t(64)), lse(size_t(8));
  Guarded<uint16_t> P(size_t(64));
  EXPECT_EQ(ec::attention_causal_softmax(bf16p(P), lse.data(), S.data(), 1, 4, 12),
            cudaErrorInvalidValue);
  EXPECT_EQ(ec::attention_causal_softmax(bf16p(P), lse.data(), S.data(), 1, 9, 8),
            cudaErrorInvalidValue);
  EXPECT_EQ(ec::attention_causal_softmax(bf16p(P) + 1, lse.data(), S.data(), 1, 4, 8),
            cudaErrorInvalidValue);
  EXPECT_EQ(ec::attention_causal_softmax(bf16p(P), nullptr, S.data(), 1, 4, 8),
            cudaErrorInvalidValue);
  EXPECT_EQ(ec::attention_causal_probs(bf16p(P), S.data(), nullptr, 1, 4, 8),
            cudaErrorInvalidValue);
  EXPECT_EQ(ec::attention_softmax_backward(bf16p(P), S.data(), nullptr, 1, 4, 8),
            cudaErrorInvalidValue);
  EXPECT_EQ(ec::attention_rowdot(lse.data(), bf16p(P), bf16p(P), 1, 4, 10, 3),
            cudaErrorInvalidValue);
  EXPECT_TRUE(S.guards_intact() && P.guards_intact() && lse.guards_intact());
}

}  // namespace
