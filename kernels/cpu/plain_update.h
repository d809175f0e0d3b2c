// CPU driver of the plain (unquantized) parameter update: rule.step on every element of a tensor,
// in parallel with OpenMP. fp32 AdamW, SGDM and sign SGDM run on the vector lanes
// (quantized_update_simd.h: cpu_simd::active_isa(), ECO_CPU_SIMD), every other rule and type (the
// fp64 backend) the scalar loop, which stays the reference: the lanes write its bits.
#pragma once
#include <cstdint>
#include <type_traits>

#include "base/math/optimizer_rules.h"
#include "kernels/cpu/quantized_update_simd.h"

namespace eco {

// How the vector path writes w, m and v. Auto: non-temporal stores for a tensor whose state is
// far larger than the caches (kStreamBytes) and whose arrays are 64-byte aligned, else ordinary
// ones. The bits are the same either way.
enum class PlainStores : uint8_t { Auto, Cached, Streamed };

namespace plain_update_detail {

constexpr int64_t kChunk = 4096;  // elements per OpenMP iteration: a multiple of every lane count
constexpr int64_t kStreamBytes = int64_t(64) << 20;  // w, grad, m, v together

template <class Rule>
constexpr bool kLaneRule = std::is_same_v<Rule, AdamWRule<float>> ||
                           std::is_same_v<Rule, SgdmRule<float>> ||
                           std::is_same_v<Rule, SignSgdmRule<float>>;

template <class Rule>
cpu_simd::LaneRule lane_rule(const Rule& rule) {
  const auto t = rule.terms();
  if constexpr (std::is_same_v<Rule, AdamWRule<float>>)
    return {true, t.grad_scale, t.beta1, t.one_minus_beta1, t.beta2, t.one_minus_beta2, t.bc1,
            t.bc2, t.eps, t.lr, t.decay, t.inject, t.injects, t.unbiased, false};
  else
    return {false, t.grad_scale, t.beta, t.one_minus_beta, 0.0f, 0.0f, 1.0f, 1.0f, 0.0f, t.lr,
            t.decay, t.inject, t.injects, false, std::is_same_v<Rule, SignSgdmRule<float>>};
}

inline bool aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

}  // namespace plain_update_detail

// w[i] = rule.step(w[i], grad[i], m[i], v[i]) for i in [0, n) (v: only where Rule::kHasV).
// Element-wise, so any split over threads and lanes gives the same bits.
template <class Rule, class T>
void plain_update_tensor(const Rule& rule, T* w, const T* grad, T* m, T* v, int64_t n,
                         PlainStores stores = PlainStores::Auto) {
  namespace d = plain_update_detail;
  if constexpr (std::is_same_v<T, float> && d::kLaneRule<Rule>) {
    const cpu_simd::Isa isa = cpu_simd::active_isa();
    if (isa != cpu_simd::Isa::Scalar) {
      const cpu_simd::LaneRule lanes = d::lane_rule(rule);
      const int64_t arrays = Rule::kHasV ? 4 : 3;
      const bool aligned =
          d::aligned64(w) && d::aligned64(m) && (!Rule::kHasV || d::aligned64(v));
      const bool stream =
          aligned && (stores == PlainStores::Streamed ||
                      (stores == PlainStores::Auto && n * arrays * 4 > d::kStreamBytes));
      const int64_t width = cpu_simd::isa_lanes(isa), chunks = (n + d::kChunk - 1) / d::kChunk;
#pragma omp parallel for schedule(static)
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t i0 = c * d::kChunk, i1 = i0 + d::kChunk < n ? i0 + d::kChunk : n;
        const int64_t body = (i1 - i0) / width * width;
        if (body > 0)
          cpu_simd::plain_step(isa, lanes, w + i0, grad + i0, m + i0, Rule::kHasV ? v + i0 : nullptr,
                               body, stream);
        for (int64_t i = i0 + body; i < i1; ++i) {
          T no_v = 0;
          w[i] = rule.step(w[i], grad[i], m[i], Rule::kHasV ? v[i] : no_v);
        }
      }
      return;
    }
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    T no_v = 0;
    w[i] = rule.step(w[i], grad[i], m[i], Rule::kHasV ? v[i] : no_v);
  }
}

}  // namespace eco
