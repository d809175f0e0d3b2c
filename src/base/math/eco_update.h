// The fused update of weights that live only in quantized form (docs/eco.md): one scale group
// under the master / naive / ECO policies, with any rule of src/base/math/optimizer_rules.h (the
// formula plain updates use too; the Rule concept is there). Shared by the CPU driver
// (kernels/cpu/quantized_update.h) and the CUDA kernels; theta never leaves registers.
//
// Quantizer interface: any type Q with these const members (FormatQuantizer, the tests' grids).
//   ECO_HD float scale_for(float absmax) const;
//       the group's new scale: absmax / rho, 0 if absmax == 0 (a fixed grid may ignore absmax)
//   ECO_HD uint32_t draw(int64_t elem) const;
//       the SR random bits of element elem (its linear index in the whole tensor, see RowRange;
//       Q carries seed, step and tensor id)
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
// 128x128 tiles (Granularity below). An update may cover a range of rows only (RowRange below),
// with the same bits as the whole-tensor update in those rows.
//
// Bit-identical backends need identical rounding of every operation: build the CUDA side with
// --fmad=false and the CPU side with -ffp-contract=off (g++ contracts to FMA under gnu++20 with
// -march=native). Checked on an H200: with both, CPU and GPU write the same bits for every
// rule x policy x state type; with nvcc's default fmad, 25-90% of m, v and master differ by ulps.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "base/math/bf16.h"
#include "base/math/hd.h"
#include "base/math/optimizer_rules.h"
#include "base/math/philox.h"
#include "base/math/scale_groups.h"

namespace eco {

// Master: an fp32 master weight takes the rule's plain step; codes + scale are re-derived
//         from it for the forward. Naive: theta is computed from dequant(W_q) and requantized;
//         the error is dropped. Eco: as Naive, and the error is injected into the momentum.
enum class UpdatePolicy : uint8_t { Master, Naive, Eco };

// Rows [begin, end) of a (rows, cols) tensor whose buffers are indexed by the linear index
// i = row * cols + col. global_offset: the index of element (begin, 0) in the whole tensor
// (begin * cols when the buffers hold the whole tensor; a shard's first global index when they
// hold only a shard's rows, as rows [0, shard rows)): the SR draw of element i is that of global
// index i + key_offset(cols), so updating the shards one by one gives the whole-tensor bits.
// Defaults: all rows, global_offset = begin * cols.
// Ranges of Block128 tensors start and end on block-row boundaries (multiples of 128, or the
// tensor's end); PerTensor tensors take the split update (TensorScaleSplit) over ranges.
struct RowRange {
  int64_t begin = 0, end = -1;  // end < 0: to the tensor's last row
  int64_t global_offset = -1;   // < 0: begin * cols
  ECO_HD int64_t end_row(int64_t rows) const { return end < 0 ? rows : end; }
  ECO_HD int64_t key_offset(int64_t cols) const {
    return global_offset < 0 ? 0 : global_offset - begin * cols;
  }
};

// The per-tensor scale's split update over row ranges: pass 1 of every range returns the old
// scale and its rows' absmax |theta|; the caller combines the ranges' maxima (max is exact and
// order-free: a cross-rank all_reduce(max) sits there), then pass 2 of every range finishes with
// the combined value (new scale = scale_for(absmax), codes, ECO's injection).
struct TensorScaleSplit {
  float old_scale;
  float absmax;
};
ECO_HD TensorScaleSplit combine(const TensorScaleSplit& a, const TensorScaleSplit& b) {
  return {a.old_scale, fmaxf(a.absmax, b.absmax)};
}

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
  S* m;            // first moment / momentum: float or bf16 bits
  S* v;            // second moment (Rule::kHasV: AdamW); null for rules without one
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
//     function of the new master weight; m and v are those of the plain rule.
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
// Element i draws its SR bits as global index i + key_offset (RowRange::key_offset).
template <class Rule, class Q, class S, class G>
ECO_HD void quantized_update_group(const Rule& rule, const Q& q, UpdatePolicy policy,
                                   const QuantizedUpdateBuffers<S, G>& b, const GroupSpan& span,
                                   float* scale, int64_t key_offset = 0) {
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
      quantized_update_pass2(rule, q, policy, b, i, old_scale, new_scale, draw(uint64_t(i + key_offset)));
    }
  *scale = new_scale;
}

}  // namespace eco
