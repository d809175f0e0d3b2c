// Update rules for weights that live only in quantized form (ECO.md): the AdamW and SGDM element
// math, and the fused update of one scale group under the master / naive / ECO policies. Shared
// by the CPU reference and the CUDA kernels; theta (the unquantized update) never leaves registers.
//
// Quantizer interface: any type Q with these const members (FormatQuantizer, the tests' grids).
//   ECO_HD float scale_for(float absmax) const;
//       the group's new scale: absmax / rho, 0 if absmax == 0 (a fixed grid may ignore absmax)
//   ECO_HD uint32_t draw(int64_t elem) const;
//       the SR random bits of element elem (its linear index in the tensor; Q carries seed,
//       step and tensor id)
//   ECO_HD Philox4x32 draws(uint64_t group) const;
//       draw(4 group + k) == draws(group).v[k], in one generator call
//   ECO_HD uint8_t encode(float x, float scale, uint32_t bits) const;
//       RTN, or SR deciding by `bits` (element i: draw(i)); saturates at +-rho; scale 0 -> 0
//   ECO_HD float decode(uint8_t code, float scale) const;
//   ECO_HD uint8_t load(const uint8_t* codes, int64_t i) const;         // packing is Q's business
//   ECO_HD void store(uint8_t* codes, int64_t i, uint8_t c) const;      //   (INT4: two per byte)
//
// Layout: a quantized tensor is a row-major (rows, cols) matrix (leading dimension ld) whose
// codes, gradient, moments and master weight are all indexed by the same linear index
// i = row * ld + col. One fp32 scale per group; the groups are rows, the whole tensor, or
// 128x128 tiles (Granularity below).
//
// Bit-identical backends need identical rounding of every operation: build the CUDA side with
// --fmad=false and the CPU side with -ffp-contract=off (g++ contracts to FMA under gnu++20 with
// -march=native). Checked on an H200: with both, CPU and GPU write the same bits for every
// rule x policy x state type; with nvcc's default fmad, 25-90% of m, v and master differ by ulps.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/adamw.h"
#include "kernels/common/bf16.h"
#include "kernels/common/hd.h"
#include "kernels/common/philox.h"
#include "kernels/common/scale_groups.h"

namespace eco {

// Master: an fp32 master weight takes the plain AdamW/SGDM step; codes + scale are re-derived
//         from it for the forward. Naive: theta is computed from dequant(W_q) and requantized;
//         the error is dropped. Eco: as Naive, and the error is injected into the momentum.
enum class UpdatePolicy : uint8_t { Master, Naive, Eco };

// SGD with momentum in EMA form: m = beta*m + (1-beta)*g, theta = w*(1 - lr*wd) - lr*m.
struct SgdmCoeffs {
  float lr, beta, weight_decay, grad_scale;
};

// ---- element math (T = float in the kernels, double in the method tests) --------------------
// Each function takes the step's uniform terms (AdamWTerms / SgdmTerms: 1 - beta1, 1 - lr*wd,
// the injection's coefficient, ...), or the coefficients, from which it derives them with the
// same operations: the same bits either way. The rules below derive them once per step; the
// GPU's per-element loops would otherwise recompute them per element (the compiler does not keep
// them across the divisions' slow-path calls).

template <class T>
struct AdamWTerms {
  T grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, bc1, bc2, eps, lr;
  T decay;    // 1 - lr*wd
  T inject;   // (bc1/lr) * ((beta1 - 1)/beta1), if injects
  bool injects;  // lr != 0 and beta1 != 0 (see adamw_inject)
  // bc1 == bc2 == 1: beta^t has dropped below 2^-25 for both (from step ~860 at betas 0.9 /
  // 0.98, ~1700 at 0.99), and m / bc1, v / bc2 are m and v bit for bit (x / 1 is x; only a NaN's
  // payload could differ, which the GPU's division replaces by its canonical NaN), so the
  // element math skips the two divisions (the GPU kernels take it as a compile-time constant:
  // true only where the host checked it, false otherwise, which divides by 1 where it could
  // skip, with the same bits).
  bool unbiased;
};

template <class T>
ECO_HD AdamWTerms<T> adamw_terms(const AdamWCoeffs& c) {
  AdamWTerms<T> t{};
  t.grad_scale = T(c.grad_scale);
  t.beta1 = T(c.beta1);
  t.one_minus_beta1 = T(1) - T(c.beta1);
  t.beta2 = T(c.beta2);
  t.one_minus_beta2 = T(1) - T(c.beta2);
  t.bc1 = T(c.bc1);
  t.bc2 = T(c.bc2);
  t.eps = T(c.eps);
  t.lr = T(c.lr);
  t.decay = T(1) - T(c.lr) * T(c.weight_decay);
  t.injects = !(c.lr == 0.0f || c.beta1 == 0.0f);
  t.inject = t.injects ? (T(c.bc1) / T(c.lr)) * ((T(c.beta1) - T(1)) / T(c.beta1)) : T(0);
  t.unbiased = c.bc1 == 1.0f && c.bc2 == 1.0f;
  return t;
}

template <class T>
ECO_HD void adamw_moments(T grad, T& m, T& v, const AdamWTerms<T>& t) {
  const T g = grad * t.grad_scale;
  m = t.beta1 * m + t.one_minus_beta1 * g;
  v = t.beta2 * v + t.one_minus_beta2 * g * g;
}
template <class T>
ECO_HD void adamw_moments(T grad, T& m, T& v, const AdamWCoeffs& c) {
  adamw_moments(grad, m, v, adamw_terms<T>(c));
}

// d = sqrt(v/bc2) + eps: the AdamW step's denominator, shared by theta and the injection.
// Without the division once both bias corrections are 1 (t.unbiased).
template <class T>
ECO_HD T adamw_denom(T v, const AdamWTerms<T>& t) {
  return eco_sqrt(t.unbiased ? v : v / t.bc2) + t.eps;
}
template <class T>
ECO_HD T adamw_denom(T v, const AdamWCoeffs& c) {
  return adamw_denom(v, adamw_terms<T>(c));
}

// theta = w*(1 - lr*wd) - lr*(m/bc1)/d, with m, v already updated.
template <class T>
ECO_HD T adamw_theta(T w, T m, T d, const AdamWTerms<T>& t) {
  return w * t.decay - t.lr * (t.unbiased ? m : m / t.bc1) / d;
}
template <class T>
ECO_HD T adamw_theta(T w, T m, T d, const AdamWCoeffs& c) {
  return adamw_theta(w, m, d, adamw_terms<T>(c));
}

// ECO: m + (bc1/lr)*(1 - 1/b1)*d*e, e = theta - dequant(W_q'). (1 - 1/b1) is evaluated as
// (b1 - 1)/b1, which is exact in the subtraction. No injection when lr == 0 (nothing to pay
// back, and the coefficient is infinite) or b1 == 0 (no momentum to carry it).
template <class T>
ECO_HD T adamw_inject(T m, T d, T e, const AdamWTerms<T>& t) {
  if (!t.injects) return m;
  return m + t.inject * d * e;
}
template <class T>
ECO_HD T adamw_inject(T m, T d, T e, const AdamWCoeffs& c) {
  return adamw_inject(m, d, e, adamw_terms<T>(c));
}

template <class T>
struct SgdmTerms {
  T grad_scale, beta, one_minus_beta, lr;
  T decay;    // 1 - lr*wd
  T inject;   // ((beta - 1)/beta)/lr, if injects
  bool injects;  // lr != 0 and beta != 0 (see sgdm_inject)
};

template <class T>
ECO_HD SgdmTerms<T> sgdm_terms(const SgdmCoeffs& c) {
  SgdmTerms<T> t{};
  t.grad_scale = T(c.grad_scale);
  t.beta = T(c.beta);
  t.one_minus_beta = T(1) - T(c.beta);
  t.lr = T(c.lr);
  t.decay = T(1) - T(c.lr) * T(c.weight_decay);
  t.injects = !(c.lr == 0.0f || c.beta == 0.0f);
  t.inject = t.injects ? ((T(c.beta) - T(1)) / T(c.beta)) / T(c.lr) : T(0);
  return t;
}

template <class T>
ECO_HD void sgdm_moment(T grad, T& m, const SgdmTerms<T>& t) {
  const T g = grad * t.grad_scale;
  m = t.beta * m + t.one_minus_beta * g;
}
template <class T>
ECO_HD void sgdm_moment(T grad, T& m, const SgdmCoeffs& c) {
  sgdm_moment(grad, m, sgdm_terms<T>(c));
}

template <class T>
ECO_HD T sgdm_theta(T w, T m, const SgdmTerms<T>& t) {
  return w * t.decay - t.lr * m;
}
template <class T>
ECO_HD T sgdm_theta(T w, T m, const SgdmCoeffs& c) {
  return sgdm_theta(w, m, sgdm_terms<T>(c));
}

// ECO: m + (1/lr)*(1 - 1/b)*e; skipped when lr == 0 or beta == 0, as for AdamW.
template <class T>
ECO_HD T sgdm_inject(T m, T e, const SgdmTerms<T>& t) {
  if (!t.injects) return m;
  return m + t.inject * e;
}
template <class T>
ECO_HD T sgdm_inject(T m, T e, const SgdmCoeffs& c) {
  return sgdm_inject(m, e, sgdm_terms<T>(c));
}

// The two rules in the shape the group update wants: moments in place, theta from (w, m, v),
// the injected momentum. SgdmRule ignores v. Each derives its step's terms once, at
// construction: build a new rule rather than changing c.
struct AdamWRule {
  AdamWCoeffs c;
  AdamWTerms<float> t = adamw_terms<float>(c);
  static constexpr bool kHasV = true;
  ECO_HD void moments(float grad, float& m, float& v) const { adamw_moments(grad, m, v, t); }
  ECO_HD float theta(float w, float m, float v) const { return adamw_theta(w, m, adamw_denom(v, t), t); }
  ECO_HD float inject(float m, float v, float e) const { return adamw_inject(m, adamw_denom(v, t), e, t); }
};

struct SgdmRule {
  SgdmCoeffs c;
  SgdmTerms<float> t = sgdm_terms<float>(c);
  static constexpr bool kHasV = false;
  ECO_HD void moments(float grad, float& m, float&) const { sgdm_moment(grad, m, t); }
  ECO_HD float theta(float w, float m, float) const { return sgdm_theta(w, m, t); }
  ECO_HD float inject(float m, float, float e) const { return sgdm_inject(m, e, t); }
};

// ---- storage types: fp32, or bf16 as raw uint16_t bits (round-to-nearest-even) ---------------

template <class S>
ECO_HD float to_f32(S x) {
  static_assert(std::is_same_v<S, float> || std::is_same_v<S, uint16_t>, "state is float or bf16 bits");
  if constexpr (std::is_same_v<S, float>) return x;
  else return bf16_to_float(x);
}

template <class S>
ECO_HD S from_f32(float x) {
  static_assert(std::is_same_v<S, float> || std::is_same_v<S, uint16_t>, "state is float or bf16 bits");
  if constexpr (std::is_same_v<S, float>) return x;
  else return float_to_bf16(x);
}

// ---- the fused group update ------------------------------------------------------------------

// One quantized tensor's buffers, all indexed by the element's linear index i.
template <class S, class G = float>
struct QuantizedUpdateBuffers {
  uint8_t* codes;  // W_q's codes
  float* master;   // Master policy: the fp32 master weight; never touched otherwise (may be null)
  const G* grad;   // dL/dW at dequant(W_q): float or bf16 bits
  S* m;            // first moment (AdamW) / momentum (SGDM): float or bf16 bits
  S* v;            // AdamW second moment; null for SGDM
};

// The group is updated in two passes over its elements, so that theta never lives in memory:
//   pass 1: update m (and v), store them (rounded to S), compute theta from the *stored* values
//           and the old weight, track absmax |theta|;      new scale = Q::scale_for(absmax);
//   pass 2: recompute theta from the stored moments and the old weight, quantize with the new
//           scale and the element's SR bits (bits = q.draw(i), which the loops take from
//           q.draws once per 4 elements), write the code, and (Eco) inject
//           e = theta - dequant(code) into m.
// Invariants:
//   - theta is a pure function of (old code, old scale, stored m, stored v, the step's
//     coefficients), all unchanged between the passes, so pass 2's theta is bit-identical to
//     pass 1's and |theta| <= absmax in pass 2. (Should a compiler contract the two copies of the
//     expression differently, absmax could be off by an ulp; Q's saturation absorbs that.)
//   - Each element's code is read before it is overwritten; the old scale is held aside, so
//     the group's scale may be written only after every pass-2 read (the CUDA kernel: read the
//     old scale into a register, block-reduce absmax, sync, pass 2, then write).
//   - m and v see exactly one moment update per step; the injection changes m only (never v),
//     only under Eco, and not when lr == 0.
//   - Master: master[i] <- theta (the plain optimizer step); the codes and the scale are a pure
//     function of the new master weight; m and v are those of plain AdamW/SGDM.
//   - Nothing but codes, the group's scale, m, v (and master under Master) is written.
template <class Rule, class Q, class S, class G>
ECO_HD float quantized_update_pass1(const Rule& rule, const Q& q, UpdatePolicy policy,
                                    const QuantizedUpdateBuffers<S, G>& b, int64_t i, float old_scale) {
  float m = to_f32(b.m[i]);
  float v = 0.0f;
  if constexpr (Rule::kHasV) v = to_f32(b.v[i]);
  rule.moments(to_f32(b.grad[i]), m, v);
  const S m_stored = from_f32<S>(m);
  b.m[i] = m_stored;
  m = to_f32(m_stored);
  if constexpr (Rule::kHasV) {
    const S v_stored = from_f32<S>(v);
    b.v[i] = v_stored;
    v = to_f32(v_stored);
  }
  if (policy == UpdatePolicy::Master) {
    const float theta = rule.theta(b.master[i], m, v);
    b.master[i] = theta;
    return theta;
  }
  return rule.theta(q.decode(q.load(b.codes, i), old_scale), m, v);
}

template <class Rule, class Q, class S, class G>
ECO_HD void quantized_update_pass2(const Rule& rule, const Q& q, UpdatePolicy policy,
                                   const QuantizedUpdateBuffers<S, G>& b, int64_t i, float old_scale,
                                   float new_scale, uint32_t bits) {
  if (policy == UpdatePolicy::Master) {
    q.store(b.codes, i, q.encode(b.master[i], new_scale, bits));
    return;
  }
  const float m = to_f32(b.m[i]);
  float v = 0.0f;
  if constexpr (Rule::kHasV) v = to_f32(b.v[i]);
  const float theta = rule.theta(q.decode(q.load(b.codes, i), old_scale), m, v);
  const uint8_t code = q.encode(theta, new_scale, bits);
  q.store(b.codes, i, code);
  if (policy == UpdatePolicy::Eco) {
    const float e = theta - q.decode(code, new_scale);
    b.m[i] = from_f32<S>(rule.inject(m, v, e));
  }
}

// ---- the same two passes on values held in registers -----------------------------------------
// The CUDA register kernel loads each element's grad, m, v and code once (vector loads), keeps
// theta in a register across the group's absmax reduction, and stores each output once. It runs
// these two functions, which are pass1/pass2 minus the memory traffic: the same operations on
// the same values in the same order, so they produce the same bits
// (tests/unit/test_eco_update_values.cpp runs both on every format x rounding x rule x policy x
// state type). pass2 recomputes theta from the stored moments and the old weight, which gives
// pass 1's theta bit for bit (see above), so carrying pass 1's theta over is the same value.

// Pass 1 of one element. w: the old weight, q.decode(old code, old_scale) under Naive / Eco, the
// master weight under Master. m, v: the state before the step (v ignored by rules without one);
// on return the values pass1 stores. Returns theta (under Master: the new master weight).
template <class Rule, class S>
ECO_HD float quantized_update_theta(const Rule& rule, float grad, float w, S& m, S& v) {
  float mf = to_f32(m);
  float vf = 0.0f;
  if constexpr (Rule::kHasV) vf = to_f32(v);
  rule.moments(grad, mf, vf);
  m = from_f32<S>(mf);
  mf = to_f32(m);
  if constexpr (Rule::kHasV) {
    v = from_f32<S>(vf);
    vf = to_f32(v);
  }
  return rule.theta(w, mf, vf);
}

// Pass 2 of one element (bits: its SR draw, q.draw(elem) for linear index elem): returns theta's
// code on the new grid; under Eco, m (pass 1's stored value) becomes the injected moment. v:
// pass 1's stored value (ignored by rules without one).
template <class Rule, class Q, class S>
ECO_HD uint8_t quantized_update_code(const Rule& rule, const Q& q, UpdatePolicy policy, float theta,
                                     S& m, S v, float new_scale, uint32_t bits) {
  const uint8_t code = q.encode(theta, new_scale, bits);
  if (policy == UpdatePolicy::Eco) {
    float vf = 0.0f;
    if constexpr (Rule::kHasV) vf = to_f32(v);
    const float e = theta - q.decode(code, new_scale);
    m = from_f32<S>(rule.inject(to_f32(m), vf, e));
  }
  return code;
}

// Updates one scale group: its codes, *scale, and m, v (master under Master) at its elements.
template <class Rule, class Q, class S, class G>
ECO_HD void quantized_update_group(const Rule& rule, const Q& q, UpdatePolicy policy,
                                   const QuantizedUpdateBuffers<S, G>& b, const GroupSpan& span,
                                   float* scale) {
  const float old_scale = *scale;
  float absmax = 0.0f;
  for (int64_t r = 0; r < span.rows; ++r)
    for (int64_t c = 0; c < span.cols; ++c)
      absmax = fmaxf(absmax, fabsf(quantized_update_pass1(rule, q, policy, b, span.index(r, c), old_scale)));
  const float new_scale = q.scale_for(absmax);
  GroupDrawCursor<Q> draw{q};  // the span's elements in increasing order
  for (int64_t r = 0; r < span.rows; ++r)
    for (int64_t c = 0; c < span.cols; ++c) {
      const int64_t i = span.index(r, c);
      quantized_update_pass2(rule, q, policy, b, i, old_scale, new_scale, draw(uint64_t(i)));
    }
  *scale = new_scale;
}

// ECO.md's AdamW on one scale group (b.v required).
template <class Q, class S, class G>
ECO_HD void eco_adamw_update_group(const Q& q, UpdatePolicy policy, const AdamWCoeffs& c,
                                   const QuantizedUpdateBuffers<S, G>& b, const GroupSpan& span,
                                   float* scale) {
  quantized_update_group(AdamWRule{c}, q, policy, b, span, scale);
}

// ECO.md's SGDM on one scale group (b.v unused).
template <class Q, class S, class G>
ECO_HD void eco_sgdm_update_group(const Q& q, UpdatePolicy policy, const SgdmCoeffs& c,
                                  const QuantizedUpdateBuffers<S, G>& b, const GroupSpan& span,
                                  float* scale) {
  quantized_update_group(SgdmRule{c}, q, policy, b, span, scale);
}

}  // namespace eco
