// kernels/cuda/norms.cu (emulated):
//  - residual_layernorm_forward / residual_rmsnorm_forward (the residual add fused in front)
//    against residual_forward (elementwise.cu) + layernorm_forward / rmsnorm_forward, bit for
//    bit: resid, out, mean, rstd; resid separate, aliasing a, aliasing b; aligned buffers
//    (16-byte path when C % 8 == 0), all misaligned, only `out` misaligned (mixed paths); plus
//    mean / rstd / out against a double reference.
//  - layernorm_backward / rmsnorm_backward against the CPU twins (kernels/cpu/norms.cpp) and
//    dweight / dbias against double; blocks in reverse order give the same bits; guards, scratch
//    bounds, dbias untouched without a bias.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/rel_err.h"
#include "emu_common.h"
#include "sweep.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/norms.cuh"

namespace {

using namespace emuh;
using bf16 = __nv_bfloat16;
namespace ec = eco::cuda;

using eco::rel_err;  // src/core/rel_err.h

enum Kind { LN, LN_NOBIAS, RMS };
const char* kind_name(Kind k) { return k == LN ? "ln" : k == LN_NOBIAS ? "ln-nobias" : "rms"; }
enum Align { ALIGNED, MISALIGNED, OUT_MISALIGNED };
const char* align_name(Align a) {
  return a == ALIGNED ? "aligned" : a == MISALIGNED ? "misaligned" : "out-misaligned";
}
enum Alias { SEPARATE, RESID_IS_A, RESID_IS_B };
const char* alias_name(Alias a) {
  return a == SEPARATE ? "resid-separate" : a == RESID_IS_A ? "resid=a" : "resid=b";
}

void forward_case(Tally& tally, int N, int C, Kind kind, Align al, Alias alias, uint64_t seed) {
  const std::string tag = std::string("fwd ") + kind_name(kind) + " N" + std::to_string(N) + " C" +
                          std::to_string(C) + " " + align_name(al) + " " + alias_name(alias);
  const size_t n = size_t(N) * C;
  const float eps = 1e-5f;
  const size_t mis = al == MISALIGNED ? 2 : 0, omis = al == ALIGNED ? 0 : 2;
  const std::vector<uint16_t> a = to_bf16(randn(n, seed, 1.0f, 0.3f));
  const std::vector<uint16_t> b = to_bf16(randn(n, seed + 1, 0.5f));
  const std::vector<float> w = randn(size_t(C), seed + 2, 0.1f, 1.0f);
  const std::vector<float> bias = randn(size_t(C), seed + 3, 0.1f);
  Guarded<float> d_w(w), d_bias(bias);
  const float* pb = kind == LN ? d_bias.data() : nullptr;
  auto check = [&](bool ok, const std::string& what) {
    ++tally.cases;
    if (!ok) tally.fail(tag + ": " + what);
  };
  // Unfused: residual_forward into a separate resid, then the norm.
  Guarded<uint16_t> ua(a, mis), ub(b, mis), ures(n, mis), uout(n, omis);
  Guarded<float> umean{size_t(N)}, urstd{size_t(N)};
  check(ec::residual_forward(bf16p(ures), bf16p(ua), bf16p(ub), int64_t(n)) == cudaSuccess,
        "residual_forward");
  if (kind == RMS)
    check(ec::rmsnorm_forward(bf16p(uout), urstd.data(), bf16p(ures), d_w.data(), N, C, eps) ==
              cudaSuccess,
          "rmsnorm_forward");
  else
    check(ec::layernorm_forward(bf16p(uout), umean.data(), urstd.data(), bf16p(ures), d_w.data(),
                                pb, N, C, eps) == cudaSuccess,
          "layernorm_forward");
  // Fused.
  Guarded<uint16_t> fa(a, mis), fb(b, mis), fres(n, mis), fout(n, omis);
  Guarded<float> fmean{size_t(N)}, frstd{size_t(N)};
  bf16* resid = alias == RESID_IS_A ? bf16p(fa) : alias == RESID_IS_B ? bf16p(fb) : bf16p(fres);
  if (kind == RMS)
    check(ec::residual_rmsnorm_forward(resid, bf16p(fout), frstd.data(), bf16p(fa), bf16p(fb),
                                       d_w.data(), N, C, eps) == cudaSuccess,
          "residual_rmsnorm_forward");
  else
    check(ec::residual_layernorm_forward(resid, bf16p(fout), fmean.data(), frstd.data(), bf16p(fa),
                                         bf16p(fb), d_w.data(), pb, N, C, eps) == cudaSuccess,
          "residual_layernorm_forward");
  Guarded<uint16_t>& fr = alias == RESID_IS_A ? fa : alias == RESID_IS_B ? fb : fres;
  long first = -1;
  long k = differ(fr.host(), ures.host(), &first);
  check(k == 0, "resid differs: " + std::to_string(k) + " first " + std::to_string(first));
  k = differ(fout.host(), uout.host(), &first);
  check(k == 0, "out differs: " + std::to_string(k) + " first " + std::to_string(first));
  check(differ(frstd.host(), urstd.host()) == 0, "rstd differs");
  if (kind != RMS)
    check(differ(fmean.host(), umean.host()) == 0, "mean differs");
  else
    check(std::all_of(fmean.bytes(), fmean.bytes() + 4 * size_t(N),
                      [](unsigned char c) { return c == 0xFF; }),
          "rms wrote mean");
  if (alias != RESID_IS_A) check(fa.host() == a, "a changed");
  if (alias != RESID_IS_B) check(fb.host() == b, "b changed");
  check(fa.guards_intact() && fb.guards_intact() && fres.guards_intact() && fout.guards_intact() &&
            frstd.guards_intact() && fmean.guards_intact() && ures.guards_intact() &&
            uout.guards_intact(),
        "guards");
  // Sanity against double: the statistics of resid, and out within bf16 rounding.
  const std::vector<uint16_t> r = ures.host(), o = uout.host();
  const std::vector<float> mm = umean.host(), rs = urstd.host();
  double worst_mean = 0, worst_rstd = 0;
  for (int row = 0; row < N; ++row) {
    double m = 0, var = 0;
    for (int c = 0; c < C; ++c) m += bf(r[size_t(row) * C + c]);
    m = kind == RMS ? 0.0 : m / C;
    for (int c = 0; c < C; ++c)
      var += (bf(r[size_t(row) * C + c]) - m) * (bf(r[size_t(row) * C + c]) - m);
    const double s = 1.0 / std::sqrt(var / C + eps);
    if (kind != RMS)
      worst_mean = std::max(worst_mean, std::fabs(mm[size_t(row)] - m) / (std::fabs(m) + 1e-3));
    worst_rstd = std::max(worst_rstd, std::fabs(rs[size_t(row)] - s) / s);
    for (int c = 0; c < C; ++c) {
      double ref = (bf(r[size_t(row) * C + c]) - m) * s * w[size_t(c)] +
                   (kind == LN ? bias[size_t(c)] : 0.0);
      const double err = std::fabs(bf(o[size_t(row) * C + c]) - ref);
      if (err > std::fabs(ref) * 0.0045 + 1e-4) {
        check(false, "out vs double at row " + std::to_string(row) + " col " + std::to_string(c));
        return;
      }
    }
  }
  check(worst_rstd < 1e-5 && worst_mean < 1e-5, "statistics vs double");
}

void backward_case(Tally& tally, int N, int C, Kind kind, Align al, uint64_t seed) {
  const std::string tag = std::string("bwd ") + kind_name(kind) + " N" + std::to_string(N) + " C" +
                          std::to_string(C) + " " + align_name(al);
  const size_t n = size_t(N) * C;
  const size_t mis = al == MISALIGNED ? 2 : 0, omis = al == ALIGNED ? 0 : 2;
  auto check = [&](bool ok, const std::string& what) {
    ++tally.cases;
    if (!ok) tally.fail(tag + ": " + what);
  };
  const std::vector<uint16_t> inp = to_bf16(randn(n, seed, 1.0f, 0.2f));
  const std::vector<uint16_t> dout = to_bf16(randn(n, seed + 1, 0.01f));
  const std::vector<uint16_t> dinp0 = to_bf16(randn(n, seed + 2, 0.01f));
  const std::vector<float> w = randn(size_t(C), seed + 3, 0.1f, 1.0f);
  const std::vector<float> dw0 = randn(size_t(C), seed + 4, 0.1f);
  const std::vector<float> db0 = randn(size_t(C), seed + 5, 0.1f);
  // Statistics from the (emulated) forward.
  Guarded<uint16_t> d_inp(inp, mis), tmp(n);
  Guarded<float> d_w(w), d_mean{size_t(N)}, d_rstd{size_t(N)};
  if (kind == RMS)
    ec::rmsnorm_forward(bf16p(tmp), d_rstd.data(), bf16p(d_inp), d_w.data(), N, C, 1e-5f);
  else
    ec::layernorm_forward(bf16p(tmp), d_mean.data(), d_rstd.data(), bf16p(d_inp), d_w.data(),
                          nullptr, N, C, 1e-5f);
  const size_t scratch_n = ec::norm_backward_scratch_floats(C);
  struct Out {
    std::vector<uint16_t> dinp;
    std::vector<float> dw, db;
    bool guards;
  };
  auto run = [&]() {
    Guarded<uint16_t> d_dout(dout, mis), d_dinp(dinp0, omis);
    Guarded<float> d_dw(dw0), d_db(db0);
    Guarded<float> scratch(std::vector<float>(scratch_n, std::nanf("")));
    float* db = kind == LN ? d_db.data() : nullptr;
    cudaError_t e;
    if (kind == RMS)
      e = ec::rmsnorm_backward(bf16p(d_dinp), d_dw.data(), bf16p(d_dout), bf16p(d_inp), d_w.data(),
                               d_rstd.data(), N, C, scratch.data());
    else
      e = ec::layernorm_backward(bf16p(d_dinp), d_dw.data(), db, bf16p(d_dout), bf16p(d_inp),
                                 d_w.data(), d_mean.data(), d_rstd.data(), N, C, scratch.data());
    check(e == cudaSuccess, "launch");
    return Out{d_dinp.host(), d_dw.host(), d_db.host(),
               d_dinp.guards_intact() && d_dw.guards_intact() && d_db.guards_intact() &&
                   scratch.guards_intact() && d_dout.host() == dout};
  };
  const Out nw = run();
  emu::reverse_blocks = true;
  const Out rv = run();
  emu::reverse_blocks = false;
  check(differ(nw.dw, rv.dw) == 0 && differ(nw.db, rv.db) == 0 && differ(nw.dinp, rv.dinp) == 0,
        "reversed block order differs");
  check(nw.guards, "guards / scratch bounds / dout changed");
  if (kind != LN) check(nw.db == db0, "dbias written without a dbias");
  // The CPU twin (fp32) on the same bf16 values and statistics; tolerances of
  // tests/gpu/test_layers_gpu.cu: bf16 dinp 5e-3 norm-wise (one bf16 rounding ~1.7e-3),
  // fp32 dweight / dbias 1e-5 (summation order only).
  {
    std::vector<float> x(n), dy(n), dx(n);
    for (size_t i = 0; i < n; ++i) x[i] = bf(inp[i]), dy[i] = bf(dout[i]), dx[i] = bf(dinp0[i]);
    std::vector<float> dw = dw0, dbc = db0, got(n);
    const std::vector<float> mean = d_mean.host(), rstd = d_rstd.host();
    if (kind == RMS)
      eco::cpu::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(),
                                 N, C);
    else
      eco::cpu::layernorm_backward(dx.data(), dw.data(), kind == LN ? dbc.data() : nullptr,
                                   dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    for (size_t i = 0; i < n; ++i) got[i] = bf(nw.dinp[i]);
    check(rel_err(got, dx) < 5e-3, "dinp vs the CPU twin: " + std::to_string(rel_err(got, dx)));
    check(rel_err(nw.dw, dw) < 1e-5,
          "dweight vs the CPU twin: " + std::to_string(rel_err(nw.dw, dw)));
    if (kind == LN)
      check(rel_err(nw.db, dbc) < 1e-5,
            "dbias vs the CPU twin: " + std::to_string(rel_err(nw.db, dbc)));
  }
  // dweight, dbias against double.
  const std::vector<float> mean = d_mean.host(), rstd = d_rstd.host();
  for (int c = 0; c < C; ++c) {
    double sw = 0, sb = 0, aw = 0, ab = 0;
    for (int r = 0; r < N; ++r) {
      const double d = bf(dout[size_t(r) * C + c]), x = bf(inp[size_t(r) * C + c]);
      const double t = d * (x - (kind == RMS ? 0.0 : mean[size_t(r)])) * rstd[size_t(r)];
      sw += t, aw += std::fabs(t), sb += d, ab += std::fabs(d);
    }
    const double ew = std::fabs(nw.dw[size_t(c)] - (dw0[size_t(c)] + sw));
    const double tw = 1e-6 * (aw + std::fabs(dw0[size_t(c)]));
    if (ew > tw) {
      check(false, "dweight vs double at col " + std::to_string(c));
      break;
    }
    if (kind == LN && std::fabs(nw.db[size_t(c)] - (db0[size_t(c)] + sb)) >
                          1e-6 * (ab + std::fabs(db0[size_t(c)]))) {
      check(false, "dbias vs double at col " + std::to_string(c));
      break;
    }
  }
}

}  // namespace

// By default (sweep.h) every kind x alignment x aliasing at one shape (7 x 1000: two blocks, the
// last partial; the 16-byte path with a ragged last step) and, on every other (N, C), each kind,
// alignment and aliasing once (a Latin square that turns with the shape); ECO_EMU_FULL=1 (label
// exhaustive) runs every combination on every shape. Forward launches cost their blocks' warp
// shuffles here, not their widths.
TEST(EmuNorms, FusedResidualNormEqualsResidualThenNormBitwise) {
  Tally tally;
  uint64_t seed = 100;
  int shape = 0;
  for (int N : {1, 7})
    for (int C : {16, 33, 768, 1000}) {
      ++shape;
      for (Kind kind : {LN, LN_NOBIAS, RMS})
        for (Align al : {ALIGNED, MISALIGNED, OUT_MISALIGNED})
          for (Alias alias : {SEPARATE, RESID_IS_A, RESID_IS_B}) {
            seed += 10;
            const bool square = (int(al) + 3 - int(kind)) % 3 == shape % 3 &&
                                (int(alias) + 3 - int(kind)) % 3 == (2 * shape) % 3;
            if (full_sweep() || (N == 7 && C == 1000) || square)
              forward_case(tally, N, C, kind, al, alias, seed);
          }
    }
  forward_case(tally, 64, 768, LN, MISALIGNED, SEPARATE, seed += 10);
  forward_case(tally, 64, 1000, RMS, ALIGNED, RESID_IS_B, seed += 10);
  EXPECT_GT(tally.cases, 0);
}

// N 1 and 7: one row chunk per row; by default (sweep.h) each kind once per (N, C), aligned or
// misaligned in turn, so that every kind meets both alignments. N above kNormRowChunks (128):
// several rows per chunk and a ragged last chunk, 65 chunks over the reduce's 8 warps; by default
// N = 129 (2 rows a chunk, the last 1) at C 33 for every kind (several column blocks: C 768 and
// 1000 at the small N); ECO_EMU_FULL=1 (label exhaustive) runs every kind and alignment on every
// small shape and N = 300 (3 rows a chunk) at C 33 and 768 for every kind.
TEST(EmuNorms, BackwardMatchesCpuTwin) {
  Tally tally;
  uint64_t seed = 1000;
  int shape = 0;
  const int big_n = full_sweep() ? 300 : 129;
  for (int N : {1, 7, big_n})
    for (int C : {16, 33, 768, 1000}) {
      ++shape;
      for (Kind kind : {LN, LN_NOBIAS, RMS})
        for (Align al : {ALIGNED, MISALIGNED}) {
          if (N == big_n && (al == MISALIGNED || C == 16 || C == 1000)) continue;
          seed += 10;
          const bool keep = N == big_n ? C == 33 : int(al) == (int(kind) + shape) % 2;
          if (full_sweep() || keep) backward_case(tally, N, C, kind, al, seed);
        }
    }
  EXPECT_GT(tally.cases, 0);
}
