// The CPU's vector plain fp32 step (kernels/cpu/plain_update.h) and vector dequantizer
// (kernels/cpu/quantize.cpp) against the scalar code they must reproduce: the same w, m and v
// byte for byte for every path this CPU runs x rule (AdamW early, late and with bias correction
// off, SGDM, sign SGDM, lr 0, clipping) x stores (cached, streamed) x thread count, on lengths with
// vector and chunk tails and on misaligned pointers, with zeros, subnormals, huge values and NaN;
// and the same floats from dequantize for E4M3 and INT4 at every granularity on odd shapes (INT4
// rows that start on an odd nibble), with NaN codes and zero scales.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "base/math/format_quantizer.h"
#include "base/math/optimizer_rules.h"
#include "base/qtensor.h"
#include "core/rng.h"
#include "kernels/cpu/plain_update.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/quantized_update_simd.h"

namespace {

using eco::Granularity;
using eco::PlainStores;
using eco::QFormat;
using eco::cpu_simd::Isa;

struct ForcedIsa {
  Isa before = eco::cpu_simd::active_isa();
  explicit ForcedIsa(Isa isa) { eco::cpu_simd::set_active_isa(isa); }
  ~ForcedIsa() { eco::cpu_simd::set_active_isa(before); }
};

struct Threads {
  int before = omp_get_max_threads();
  explicit Threads(int n) { omp_set_num_threads(n); }
  ~Threads() { omp_set_num_threads(before); }
};

std::vector<Isa> vector_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Avx2, Isa::Avx512})
    if (int(isa) <= int(eco::cpu_simd::best_isa())) out.push_back(isa);
  return out;
}

float awkward(eco::Rng& rng, double scale) {
  const uint64_t pick = rng.next_u64() % 64;
  if (pick == 0) return 0.0f;
  if (pick == 1) return -0.0f;
  if (pick == 2) return float(rng.normal()) * 1e-40f;  // subnormal
  if (pick == 3) return float(rng.normal()) * 1e30f;   // huge
  if (pick == 4) return std::numeric_limits<float>::quiet_NaN();
  return float(rng.normal() * scale);
}

// Byte for byte, but two NaNs are equal whatever their sign bits (x86 keeps the first operand's
// NaN of a sum, and which operand comes first is the compiler's choice at each call site).
std::string first_difference(const std::vector<float>& got, const std::vector<float>& want,
                             const char* what) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    return std::string(what) + "[" + std::to_string(i) + "]: " + std::to_string(got[i]) +
           " != " + std::to_string(want[i]);
  }
  return "";
}

// Room for `n` elements at `offset` floats past a 64-byte boundary.
struct Arrays {
  std::vector<float> w, g, m, v;
};

Arrays make_arrays(int64_t n, uint64_t seed) {
  Arrays a;
  eco::Rng rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    a.w.push_back(awkward(rng, 0.05));
    a.g.push_back(awkward(rng, 0.01));
    a.m.push_back(float(1e-3 * rng.normal()));
    a.v.push_back(float(1e-6 * std::fabs(rng.normal())));
  }
  return a;
}

template <class Rule>
Arrays run(const Rule& rule, const Arrays& start, int64_t offset, PlainStores stores) {
  const int64_t n = int64_t(start.w.size());
  // 64-byte aligned storage (vector<float> gives 16); offset floats in.
  std::vector<float> w(size_t(n + 32)), g(size_t(n + 32)), m(size_t(n + 32)), v(size_t(n + 32));
  auto at = [offset](std::vector<float>& x) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(x.data());
    return reinterpret_cast<float*>((p + 63) / 64 * 64) + offset;
  };
  float *pw = at(w), *pg = at(g), *pm = at(m), *pv = at(v);
  std::memcpy(pw, start.w.data(), size_t(n) * 4), std::memcpy(pg, start.g.data(), size_t(n) * 4);
  std::memcpy(pm, start.m.data(), size_t(n) * 4), std::memcpy(pv, start.v.data(), size_t(n) * 4);
  eco::plain_update_tensor(rule, pw, pg, pm, Rule::kHasV ? pv : nullptr, n, stores);
  return {{pw, pw + n}, {pg, pg + n}, {pm, pm + n}, {pv, pv + n}};
}

template <class Rule>
void expect_scalar_bytes(const eco::RuleStep& step, const std::string& name) {
  const std::vector<Isa> isas = vector_isas();
  if (isas.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  const Rule rule(step);
  // Lengths: one vector tail, a chunk and a tail, several chunks (4096 elements each).
  for (int64_t n : {int64_t(37), int64_t(4096 + 21), int64_t(3 * 4096 + 5)}) {
    const Arrays start = make_arrays(n, uint64_t(n) * 7 + 1);
    Arrays want;
    {
      const ForcedIsa forced(Isa::Scalar);
      want = run(rule, start, 0, PlainStores::Cached);
    }
    for (Isa isa : isas)
      for (PlainStores stores : {PlainStores::Cached, PlainStores::Streamed})
        for (int64_t offset : {int64_t(0), int64_t(3)})
          for (int threads : {1, 2}) {
            const ForcedIsa forced(isa);
            const Threads t(threads);
            const Arrays got = run(rule, start, offset, stores);
            const std::string where = name + " on " + eco::cpu_simd::isa_name(isa) + ", n " +
                                      std::to_string(n) + ", offset " + std::to_string(offset) +
                                      (stores == PlainStores::Streamed ? ", streamed" : ", cached") +
                                      ", " + std::to_string(threads) + " thread(s)";
            EXPECT_EQ(first_difference(got.w, want.w, "w"), "") << where;
            EXPECT_EQ(first_difference(got.m, want.m, "m"), "") << where;
            if (Rule::kHasV) {
              EXPECT_EQ(first_difference(got.v, want.v, "v"), "") << where;
            }
          }
  }
}

TEST(PlainUpdateSimd, AdamWWritesTheScalarBytes) {
  expect_scalar_bytes<eco::AdamWRule<float>>(
      eco::adamw_step(1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1), "AdamW step 1");
  expect_scalar_bytes<eco::AdamWRule<float>>(
      eco::adamw_step(3e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.37f, 2000), "AdamW step 2000, clipped");
  eco::RuleStep unbiased = eco::adamw_step(1e-3f, 0.8f, 0.9f, 1e-6f, 0.01f, 1.0f, 5);
  unbiased.bc1 = unbiased.bc2 = 1.0f;  // bias correction off: the rule's unbiased() branch
  expect_scalar_bytes<eco::AdamWRule<float>>(unbiased, "AdamW without bias correction");
  expect_scalar_bytes<eco::AdamWRule<float>>(
      eco::adamw_step(0.0f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 3), "AdamW lr 0");
}

TEST(PlainUpdateSimd, SgdmAndSignSgdmWriteTheScalarBytes) {
  expect_scalar_bytes<eco::SgdmRule<float>>(eco::sgdm_step(0.02f, 0.9f, 0.1f, 1.0f), "SGDM");
  expect_scalar_bytes<eco::SgdmRule<float>>(eco::sgdm_step(0.02f, 0.0f, 0.0f, 0.5f),
                                            "SGDM beta 0, clipped");
  expect_scalar_bytes<eco::SignSgdmRule<float>>(
      eco::momentum_step(eco::RuleKind::SignSgdm, 1e-3f, 0.9f, 0.1f, 1.0f), "sign SGDM");
}

// Sign SGDM's sign of a zero, a negative zero and a NaN momentum is 0 on the lanes too.
TEST(PlainUpdateSimd, SignOfZeroAndNanMomentumIsZero) {
  const std::vector<Isa> isas = vector_isas();
  if (isas.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  const eco::SignSgdmRule<float> rule(
      eco::momentum_step(eco::RuleKind::SignSgdm, 0.5f, 0.0f, 0.0f, 1.0f));  // m = grad
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> grads = {0.0f, -0.0f, nan, 2.0f, -3.0f, 1e-40f, -1e-40f, 0.0f,
                                    0.0f, -0.0f, nan, 2.0f, -3.0f, 1e-40f, -1e-40f, 0.0f};
  for (Isa isa : isas) {
    const ForcedIsa forced(isa);
    std::vector<float> w(grads.size(), 1.0f), m(grads.size(), 0.0f);
    eco::plain_update_tensor(rule, w.data(), grads.data(), m.data(), static_cast<float*>(nullptr),
                             int64_t(w.size()));
    for (size_t i = 0; i < w.size(); ++i) {
      const float want = grads[i] > 0 ? 0.5f : grads[i] < 0 ? 1.5f : 1.0f;
      EXPECT_EQ(w[i], want) << eco::cpu_simd::isa_name(isa) << " grad " << grads[i];
    }
  }
}

// dequantize on the lanes: the scalar floats for both formats at every granularity, with
// shapes whose rows are not a multiple of the vector (and INT4 rows starting on odd nibbles).
TEST(DequantizeSimd, EveryFormatAndGranularityGivesTheScalarFloats) {
  const std::vector<Isa> isas = vector_isas();
  if (isas.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  struct Shape {
    int64_t rows, cols;
  };
  for (QFormat format : {QFormat::E4M3, QFormat::INT4})
    for (Granularity gran : {Granularity::PerRow, Granularity::PerTensor, Granularity::Block128})
      for (Shape s : {Shape{5, 7}, Shape{9, 77}, Shape{130, 301}, Shape{3, 256}}) {
        const int64_t n = s.rows * s.cols;
        std::vector<uint8_t> codes(size_t(eco::code_bytes(format, n)));
        std::vector<float> scales(size_t(eco::num_scales(gran, s.rows, s.cols)));
        eco::Rng rng(uint64_t(n) + 17);
        for (auto& c : codes) c = uint8_t(rng.next_u64());  // E4M3: NaN codes included
        for (size_t k = 0; k < scales.size(); ++k)
          scales[k] = k % 5 == 2 ? 0.0f : float(1e-3 * (1 + rng.uniform()));
        const eco::QTensor q =
            eco::qtensor_view(format, gran, s.rows, s.cols, codes.data(), scales.data());
        std::vector<float> want(static_cast<size_t>(n));
        {
          const ForcedIsa forced(Isa::Scalar);
          eco::dequantize(q, want.data());
        }
        for (Isa isa : isas) {
          const ForcedIsa forced(isa);
          std::vector<float> got(size_t(n), -1.0f);
          eco::dequantize(q, got.data());
          EXPECT_EQ(first_difference(got, want, "out"), "")
              << eco::cpu_simd::isa_name(isa) << " " << (format == QFormat::INT4 ? "INT4" : "E4M3")
              << " " << eco::granularity_name(gran) << " " << s.rows << " x " << s.cols;
        }
      }
}

}  // namespace
