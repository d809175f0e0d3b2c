// kernels/cuda/classifier.cu (emulated) crossentropy_forward_backward with a row stride
// ld >= V: strided against packed (ld == V) bit for bit (losses, dlogits), padding columns
// written 0, ignored rows (target -1) zero over the whole stride, in place and out of place,
// loss only, blocks in reverse order; losses and gradients against the CPU double reference
// (kernels/cpu/classifier.cpp); a -inf logit gives the CPU's finite loss.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "emu_common.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/classifier.cuh"

namespace {

using namespace emuh;
using bf16 = __nv_bfloat16;

void run(Tally& tally, int N, int V, int ld, const std::vector<int32_t>& targets, uint64_t seed) {
  char name[64];  // (snprintf: "N" + std::to_string trips g++ 12's -Wrestrict at -O3)
  std::snprintf(name, sizeof name, "N%d V%d ld%d", N, V, ld);
  const std::string tag = name;
  int valid = 0;
  for (int t : targets) valid += t >= 0;
  const float dloss = valid ? 1.0f / float(valid) : 1.0f;
  // logits (N, V) and the strided copy (N, ld) whose padding is NaN: a read of it poisons.
  const std::vector<uint16_t> packed = to_bf16(randn(size_t(N) * V, seed, 3.0f));
  std::vector<uint16_t> strided(size_t(N) * ld, 0x7fc1);
  for (int n = 0; n < N; ++n)
    std::memcpy(&strided[size_t(n) * ld], &packed[size_t(n) * V], size_t(V) * 2);
  Guarded<int32_t> d_t(targets);
  auto check = [&](bool ok, const std::string& what) {
    ++tally.cases;
    if (!ok) tally.fail(tag + ": " + what);
  };
  // A: packed, out of place (the baseline).
  Guarded<uint16_t> lP(packed), dP(size_t(N) * V);
  Guarded<float> lossP{size_t(N)};
  check(eco::cuda::crossentropy_forward_backward(lossP.data(), bf16p(dP), bf16p(lP), d_t.data(), N,
                                                 V, V, dloss) == cudaSuccess,
        "packed launch");
  const std::vector<float> loss_p = lossP.host();
  const std::vector<uint16_t> g_p = dP.host();
  check(lP.host() == packed && lP.guards_intact() && dP.guards_intact() && lossP.guards_intact(),
        "packed: logits changed or guards broken");
  // B: strided, out of place, dlogits pre-filled with NaN.
  Guarded<uint16_t> lS(strided), dS(size_t(N) * ld);
  Guarded<float> lossS{size_t(N)};
  check(eco::cuda::crossentropy_forward_backward(lossS.data(), bf16p(dS), bf16p(lS), d_t.data(), N,
                                                 V, ld, dloss) == cudaSuccess,
        "strided launch");
  const std::vector<uint16_t> g_s = dS.host();
  check(differ(lossS.host(), loss_p) == 0, "strided losses differ from packed");
  long bad_v = 0, bad_pad = 0, bad_ign = 0;
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < ld; ++c) {
      const uint16_t g = g_s[size_t(n) * ld + c];
      if (targets[size_t(n)] < 0 && g != 0) ++bad_ign;
      if (c < V && g != g_p[size_t(n) * V + c]) ++bad_v;
      if (c >= V && g != 0) ++bad_pad;
    }
  check(bad_v == 0, "strided dlogits[:, :V] differ from packed: " + std::to_string(bad_v));
  check(bad_pad == 0, "padding columns not 0: " + std::to_string(bad_pad));
  check(bad_ign == 0, "ignored rows not 0 over the stride: " + std::to_string(bad_ign));
  check(lS.host() == strided && lS.guards_intact() && dS.guards_intact() && lossS.guards_intact(),
        "strided: logits changed or guards broken");
  // C: strided, in place (and once more with the blocks in reverse order).
  for (bool rev : {false, true}) {
    Guarded<uint16_t> buf(strided);
    Guarded<float> lossI{size_t(N)};
    emu::reverse_blocks = rev;
    check(eco::cuda::crossentropy_forward_backward(lossI.data(), bf16p(buf), bf16p(buf), d_t.data(),
                                                   N, V, ld, dloss) == cudaSuccess,
          "in-place launch");
    emu::reverse_blocks = false;
    long first = -1;
    const long k = differ(buf.host(), g_s, &first);
    check(k == 0, std::string("in-place") + (rev ? " reversed" : "") +
                      " dlogits differ: " + std::to_string(k) + " first " + std::to_string(first));
    check(differ(lossI.host(), loss_p) == 0, "in-place losses differ");
    check(buf.guards_intact() && lossI.guards_intact(), "in-place guards");
  }
  // D: packed, in place.
  {
    Guarded<uint16_t> buf(packed);
    Guarded<float> lossI{size_t(N)};
    eco::cuda::crossentropy_forward_backward(lossI.data(), bf16p(buf), bf16p(buf), d_t.data(), N, V,
                                             V, dloss);
    check(differ(buf.host(), g_p) == 0 && differ(lossI.host(), loss_p) == 0,
          "packed in-place differs from packed out-of-place");
  }
  // E: loss only (dlogits null), strided.
  {
    Guarded<uint16_t> l(strided);
    Guarded<float> lossO{size_t(N)};
    eco::cuda::crossentropy_forward_backward(lossO.data(), nullptr, bf16p(l), d_t.data(), N, V, ld,
                                             dloss);
    check(differ(lossO.host(), loss_p) == 0 && l.host() == strided, "loss-only differs");
  }
  // F: the CPU double reference on the same bf16 logits (rows with a target in [0, V)).
  std::vector<double> x(packed.size()), g_ref(packed.size()), loss_ref(static_cast<size_t>(N));
  for (size_t i = 0; i < packed.size(); ++i) x[i] = bf(packed[i]);
  std::vector<int32_t> t_ref = targets;
  for (auto& t : t_ref)
    if (t >= V) t = -1;
  eco::cpu::crossentropy_forward_backward<double>(loss_ref.data(), g_ref.data(), x.data(),
                                                  t_ref.data(), N, V, dloss);
  double worst_loss = 0, worst_g = 0;
  long bad_g = 0;
  for (int n = 0; n < N; ++n) {
    const int t = targets[size_t(n)];
    if (t >= V) {
      check(std::isnan(loss_p[size_t(n)]), "target >= V: loss not NaN");
      continue;
    }
    if (t < 0) {
      check(loss_p[size_t(n)] == 0.0f, "ignored row: loss not 0");
      continue;
    }
    const double rel =
        std::fabs(loss_p[size_t(n)] - loss_ref[size_t(n)]) / std::fabs(loss_ref[size_t(n)]);
    worst_loss = std::max(worst_loss, rel);
    for (int c = 0; c < V; ++c) {
      // bf16 rounding (<= 2^-9 relative) and the fp32 softmax sum; the target element's
      // g - dloss also carries dloss's fp32 error.
      const double r = g_ref[size_t(n) * V + c], g = bf(g_p[size_t(n) * V + c]);
      const double err = std::fabs(g - r), tol = std::fabs(r) * 0.0045 + dloss * 1e-6;
      worst_g = std::max(worst_g, err / (std::fabs(r) + dloss * 1e-6));
      if (err > tol) ++bad_g;
    }
  }
  check(worst_loss <= 1e-5, "loss vs CPU double rel " + std::to_string(worst_loss));
  check(bad_g == 0, "dlogits vs CPU double: " + std::to_string(bad_g) + " out of tolerance");
}

}  // namespace

TEST(EmuClassifier, StridedRowsMatchPackedAndCpuReference) {
  Tally tally;
  run(tally, 7, 11, 64, {3, -1, 0, 10, 5, 11, 10}, 1);  // 11 = V: the NaN-loss row
  run(tally, 7, 11, 11, {3, -1, 0, 10, 5, -1, 10}, 2);  // ld == V through the same paths
  run(tally, 3, 1000, 1024, {17, -1, 999}, 3);
  run(tally, 4, 2048, 2048 + 8, {0, 2047, -1, 1024}, 4);  // V a multiple of kUnroll * 512
  run(tally, 5, 2047, 2053, {2046, 1, 2, -1, 3}, 5);
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuClassifier, GptVocabularyPaddedRowsMatchCpuReference) {
  Tally tally;
  run(tally, 2, 50257, 50304, {50256, -1}, 6);
  EXPECT_GT(tally.cases, 0);
}

// A -inf logit where a thread starts its sweep (column = thread id) or later in the row: the
// online max/sum must skip it (exp(-inf - -inf) is NaN), giving the CPU's finite loss.
TEST(EmuClassifier, NegativeInfinityLogitGivesCpuLoss) {
  const int V = 1000;
  for (int pos : {0, 5, 600}) {
    std::vector<uint16_t> x = to_bf16(randn(V, 1, 2.0f));
    x[size_t(pos)] = 0xff80;  // -inf
    Guarded<uint16_t> d(x), g{size_t(V)};
    Guarded<int32_t> t(std::vector<int32_t>{3});
    Guarded<float> loss{size_t(1)};
    ASSERT_EQ(eco::cuda::crossentropy_forward_backward(loss.data(), bf16p(g), bf16p(d), t.data(),
                                                       1, V, V, 1.0f),
              cudaSuccess);
    std::vector<double> xd(V), gd(V);
    double ld;
    const int32_t tt = 3;
    for (int i = 0; i < V; ++i) xd[size_t(i)] = bf(x[size_t(i)]);
    eco::cpu::crossentropy_forward_backward<double>(&ld, gd.data(), xd.data(), &tt, 1, V, 1.0f);
    const float l = loss.host()[0];
    ASSERT_TRUE(std::isfinite(l)) << "-inf at column " << pos;
    EXPECT_NEAR(l, ld, 1e-5 * std::fabs(ld)) << "-inf at column " << pos;
    EXPECT_EQ(g.host()[size_t(pos)], 0) << "dlogit of the -inf column, column " << pos;
  }
}
