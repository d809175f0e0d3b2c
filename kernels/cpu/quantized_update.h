// CPU driver of the quantized-weight updates: applies src/base/math/eco_update.h's group update
// to the scale groups of a row range of a row-major (rows, cols) matrix, in parallel with OpenMP.
// The per-group math lives in src/base/math; this file only decides who does which group. Its
// CUDA twin is kernels/cuda/optimizer_update.cu.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "base/math/eco_update.h"
#include "base/math/format_quantizer.h"
#include "base/math/optimizer_rules.h"
#include "base/math/scale_groups.h"
#include "kernels/cpu/quantized_update_simd.h"

namespace eco {

// Rows and 128x128 tiles are independent groups, one per OpenMP iteration. The per-tensor group
// is split over threads instead (quantized_update_tensor_absmax / _finish): pass 1 over chunks
// with a max-reduction of |theta| (fmaxf is exact and order-free, so the scale depends neither
// on the thread count nor on how the rows are cut into ranges), then the new scale, then pass 2
// over the same chunks.
// Packed codes (INT4: two per byte) must not be written by two threads at once: the per-tensor
// chunks start at even elements (absolute multiples of kChunk), and with odd cols (neighbouring
// rows or tiles may share a byte) the groups run one after another. Two ranges whose boundary
// splits a byte must be updated one after the other (store_code rewrites only its own nibble).
//
// The vector path (quantized_update_simd.h: AVX-512 or AVX2, cpu_simd::active_isa()) takes
// AdamWRule<float> and SgdmRule<float> with E4M3 or INT4 codes, fp32 gradients and fp32 or bf16
// moments; any other rule, format or type runs the scalar code below. It updates the same groups
// in the same chunks; within a contiguous run of elements (a group's row, a chunk) the lanes take
// the whole vectors and the scalar code the rest (an INT4 run's odd first element, the tail), the
// SR words are drawn per run (cpu_simd::sr_bits), and the bytes written are the scalar path's.
// A row or tile group's pass 2 reads the theta and denom its pass 1 computed (cpu_simd::LaneCarry,
// the same bits) instead of recomputing them; the per-tensor split, whose passes run far apart,
// recomputes them.

namespace quantized_update_detail {

template <class Rule, class S, class G>
void check_buffers(UpdatePolicy policy, const QuantizedUpdateBuffers<S, G>& b, const float* scales,
                   int64_t rows, int64_t cols, const RowRange& range) {
  ECO_ASSERT(b.codes && b.grad && b.m && scales, "null buffer ({}x{})", rows, cols);
  ECO_ASSERT(policy != UpdatePolicy::Master || b.master, "Master policy without a master weight");
  if constexpr (Rule::kHasV) ECO_ASSERT(b.v, "AdamW without v");
  const int64_t end = range.end_row(rows);
  ECO_ASSERT(0 <= range.begin && range.begin <= end && end <= rows,
             "row range [{}, {}) of a tensor of {} rows", range.begin, end, rows);
  ECO_ASSERT(range.key_offset(cols) + range.begin * cols >= 0, "negative global offset {}",
             range.global_offset);
}

constexpr int64_t kChunk = 4096;  // even, so packed INT4 bytes are never shared (and a multiple
                                  // of 4, so no SR draw group is split between threads)

// f(state, i0, i1) for the chunks [i0, i1) of elements [first, last) over OpenMP threads
// (chunks: absolute multiples of kChunk cut to the range), each thread's chunks in increasing
// order; each thread makes its state with make_state() before its chunks and hands it to
// done(state) after them (one thread at a time).
template <class MakeState, class F, class Done>
void for_each_range_chunk(int64_t first, int64_t last, MakeState&& make_state, F&& f,
                          Done&& done) {
  if (first >= last) return;
  const int64_t c0 = first / kChunk, c1 = (last - 1) / kChunk + 1;
#pragma omp parallel
  {
    auto state = make_state();
#pragma omp for schedule(static)
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t i0 = c * kChunk > first ? c * kChunk : first;
      const int64_t i1 = (c + 1) * kChunk < last ? (c + 1) * kChunk : last;
      f(state, i0, i1);
    }
#pragma omp critical
    done(state);
  }
}

// The vector path of an update, or none (isa Scalar): see the top of the file.
template <class Rule, class Q, class S, class G>
struct LaneUpdate {
  static constexpr bool kTypes =
      std::is_same_v<Q, FormatQuantizer> && std::is_same_v<G, float> &&
      (std::is_same_v<S, float> || std::is_same_v<S, uint16_t>) &&
      (std::is_same_v<Rule, AdamWRule<float>> || std::is_same_v<Rule, SgdmRule<float>>);
  static constexpr int64_t kTile = 1024;  // SR words drawn per call (even: INT4 bytes kept whole)

  const Rule& rule;
  const Q& q;
  UpdatePolicy policy;
  const QuantizedUpdateBuffers<S, G>& b;
  cpu_simd::Isa isa = cpu_simd::Isa::Scalar;
  cpu_simd::LaneRule lanes_rule{};
  cpu_simd::LaneBuffers lanes_buffers{};

  LaneUpdate(const Rule& r, const Q& quantizer, UpdatePolicy p,
             const QuantizedUpdateBuffers<S, G>& buffers)
      : rule(r), q(quantizer), policy(p), b(buffers) {
    if constexpr (kTypes) {
      if (q.format != QFormat::E4M3 && q.format != QFormat::INT4) return;
      isa = cpu_simd::active_isa();
      const auto t = rule.terms();
      if constexpr (std::is_same_v<Rule, AdamWRule<float>>)
        lanes_rule = {true, t.grad_scale, t.beta1, t.one_minus_beta1, t.beta2, t.one_minus_beta2,
                      t.bc1, t.bc2, t.eps, t.lr, t.decay, t.inject, t.injects, t.unbiased, false};
      else
        lanes_rule = {false, t.grad_scale, t.beta, t.one_minus_beta, 0.0f, 0.0f, 1.0f, 1.0f,
                      0.0f, t.lr, t.decay, t.inject, t.injects, false, false};
      lanes_buffers = {b.codes, b.master, b.grad, b.m, b.v, std::is_same_v<S, uint16_t>};
    }
  }
  bool vector() const { return isa != cpu_simd::Isa::Scalar; }

  // [i, i1) split as the lanes take it: [i, a) and [a + body, i1) scalar, [a, a + body) lanes.
  void split(int64_t i, int64_t i1, int64_t& a, int64_t& body) const {
    a = q.format == QFormat::INT4 && (i & 1) && i < i1 ? i + 1 : i;
    body = (i1 - a) / cpu_simd::isa_lanes(isa) * cpu_simd::isa_lanes(isa);
  }

  // Pass 1 of elements [i0, i1): their absmax |theta|; carry: element i at i - i0 (the lanes'
  // elements only). (Only where vector(), as pass2.)
  float pass1(int64_t i0, int64_t i1, float old_scale, const cpu_simd::LaneCarry& carry) const {
    float absmax = 0.0f;
    if constexpr (kTypes) {
      int64_t a, body;
      split(i0, i1, a, body);
      for (int64_t i = i0; i < a; ++i)
        absmax = fmaxf(absmax, fabsf(quantized_update_pass1(rule, q, policy, b, i, old_scale)));
      if (body > 0)
        absmax = fmaxf(absmax, cpu_simd::pass1(isa, lanes_rule, q.format, policy, lanes_buffers,
                                               a, body, old_scale, carry.at(a - i0)));
      for (int64_t i = a + body; i < i1; ++i)
        absmax = fmaxf(absmax, fabsf(quantized_update_pass1(rule, q, policy, b, i, old_scale)));
    }
    return absmax;
  }

  // Pass 2 of elements [i0, i1), element i drawing as global index i + key; carry: pass 1's of the
  // same [i0, i1). Each tile's lanes are some of pass 1's vectors: they start a multiple of the
  // lane count (kTile is one) past where pass 1's start and take whole vectors up to i1.
  void pass2(int64_t i0, int64_t i1, float old_scale, float new_scale, int64_t key,
             const cpu_simd::LaneCarry& carry) const {
    if constexpr (kTypes) {
      alignas(64) uint32_t bits[kTile];
      for (int64_t t0 = i0; t0 < i1; t0 += kTile) {
        const int64_t t1 = t0 + kTile < i1 ? t0 + kTile : i1;
        if (q.rounding == Rounding::SR) cpu_simd::sr_bits(isa, q, uint64_t(t0 + key), t1 - t0, bits);
        else std::memset(bits, 0, size_t(t1 - t0) * sizeof(uint32_t));  // RTN draws nothing
        int64_t a, body;
        split(t0, t1, a, body);
        for (int64_t i = t0; i < a; ++i)
          quantized_update_pass2(rule, q, policy, b, i, old_scale, new_scale, bits[i - t0]);
        if (body > 0)
          cpu_simd::pass2(isa, lanes_rule, q.format, q.rounding, policy, lanes_buffers, a, body,
                          old_scale, new_scale, bits + (a - t0), carry.at(a - i0));
        for (int64_t i = a + body; i < t1; ++i)
          quantized_update_pass2(rule, q, policy, b, i, old_scale, new_scale, bits[i - t0]);
      }
    }
  }

  // quantized_update_group on the lanes, row by row of the span, pass 1's theta and denom carried
  // to pass 2 in this thread's buffer (two floats per element of the group: it stays in L1/L2).
  void group(const GroupSpan& span, float* scale, int64_t key) const {
    thread_local std::vector<float> carried;  // grows to the largest group, then stays
    const int64_t n = span.rows * span.cols;
    cpu_simd::LaneCarry carry{};
    if (policy != UpdatePolicy::Master) {
      if (carried.size() < size_t(2 * n)) carried.resize(size_t(2 * n));
      carry = {carried.data(), carried.data() + n};
    }
    const float old_scale = *scale;
    float absmax = 0.0f;
    for (int64_t r = 0; r < span.rows; ++r)
      absmax = fmaxf(absmax, pass1(span.index(r, 0), span.index(r, 0) + span.cols, old_scale,
                                   carry.at(r * span.cols)));
    const float new_scale = q.scale_for(absmax);
    for (int64_t r = 0; r < span.rows; ++r)
      pass2(span.index(r, 0), span.index(r, 0) + span.cols, old_scale, new_scale, key,
            carry.at(r * span.cols));
    *scale = new_scale;
  }
};

}  // namespace quantized_update_detail

// Per-tensor scales, pass 1 over rows `range`: moments (and master) stored; returns the old
// scale and the range's absmax |theta| (combine() them across ranges).
template <class Rule, class Q, class S, class G>
TensorScaleSplit quantized_update_tensor_absmax(const Rule& rule, const Q& q, UpdatePolicy policy,
                                                const QuantizedUpdateBuffers<S, G>& b,
                                                const float* scales, int64_t rows, int64_t cols,
                                                const RowRange& range = {}) {
  namespace d = quantized_update_detail;
  d::check_buffers<Rule>(policy, b, scales, rows, cols, range);
  const float old_scale = scales[0];
  const d::LaneUpdate<Rule, Q, S, G> lanes(rule, q, policy, b);
  float absmax = 0.0f;
  d::for_each_range_chunk(
      range.begin * cols, range.end_row(rows) * cols, [] { return 0.0f; },
      [&](float& local, int64_t i0, int64_t i1) {
        if (lanes.vector()) {
          local = fmaxf(local, lanes.pass1(i0, i1, old_scale, {}));  // pass 2 runs far apart
          return;
        }
        for (int64_t i = i0; i < i1; ++i)
          local = fmaxf(local, fabsf(quantized_update_pass1(rule, q, policy, b, i, old_scale)));
      },
      [&](float local) { absmax = fmaxf(absmax, local); });
  return {old_scale, absmax};
}

// Per-tensor scales, pass 2 over rows `range` with the combined split of every range's pass 1:
// codes, ECO's injection, and scales[0] = q.scale_for(split.absmax).
template <class Rule, class Q, class S, class G>
void quantized_update_tensor_finish(const Rule& rule, const Q& q, UpdatePolicy policy,
                                    const QuantizedUpdateBuffers<S, G>& b, float* scales,
                                    int64_t rows, int64_t cols, const TensorScaleSplit& split,
                                    const RowRange& range = {}) {
  namespace d = quantized_update_detail;
  d::check_buffers<Rule>(policy, b, scales, rows, cols, range);
  const float new_scale = q.scale_for(split.absmax);
  const int64_t key = range.key_offset(cols);
  const d::LaneUpdate<Rule, Q, S, G> lanes(rule, q, policy, b);
  d::for_each_range_chunk(
      range.begin * cols, range.end_row(rows) * cols,
      [&] { return GroupDrawCursor<Q>{q}; },  // each thread's chunks in increasing order
      [&](GroupDrawCursor<Q>& draw, int64_t i0, int64_t i1) {
        if (lanes.vector()) {
          lanes.pass2(i0, i1, split.old_scale, new_scale, key, {});
          return;
        }
        for (int64_t i = i0; i < i1; ++i)
          quantized_update_pass2(rule, q, policy, b, i, split.old_scale, new_scale,
                                 draw(uint64_t(i + key)));
      },
      [](const GroupDrawCursor<Q>&) {});
  scales[0] = new_scale;
}

// The update of rows `range` (all rows by default): PerRow and Block128 groups (a Block128
// range starts and ends on block-row boundaries), or PerTensor over all rows (a range of a
// PerTensor tensor takes the split update above).
template <class Rule, class Q, class S, class G>
void quantized_update_matrix(const Rule& rule, const Q& q, UpdatePolicy policy,
                             const QuantizedUpdateBuffers<S, G>& b, float* scales, int64_t rows,
                             int64_t cols, Granularity granularity, const RowRange& range = {}) {
  quantized_update_detail::check_buffers<Rule>(policy, b, scales, rows, cols, range);
  const int64_t end = range.end_row(rows);
  if (granularity == Granularity::PerTensor) {
    ECO_ASSERT(range.begin == 0 && end == rows,
               "rows [{}, {}) of a per-tensor-scaled tensor of {} rows: use the split update "
               "(quantized_update_tensor_absmax / _finish)", range.begin, end, rows);
    const TensorScaleSplit split = quantized_update_tensor_absmax(rule, q, policy, b, scales, rows, cols, range);
    quantized_update_tensor_finish(rule, q, policy, b, scales, rows, cols, split, range);
    return;
  }
  int64_t k0 = range.begin, k1 = end;  // PerRow: group k is row k
  if (granularity == Granularity::Block128) {
    ECO_ASSERT(range.begin % kScaleBlock == 0 && (end % kScaleBlock == 0 || end == rows),
               "rows [{}, {}) of a tensor with 128x128 block scales: a range must start and end "
               "on a block-row boundary (a multiple of {}) or at the tensor's end ({} rows)",
               range.begin, end, kScaleBlock, rows);
    const int64_t tiles_per_row = (cols + kScaleBlock - 1) / kScaleBlock;
    k0 = range.begin / kScaleBlock * tiles_per_row;
    k1 = (end + kScaleBlock - 1) / kScaleBlock * tiles_per_row;
  }
  const int64_t key = range.key_offset(cols);
  const quantized_update_detail::LaneUpdate<Rule, Q, S, G> lanes(rule, q, policy, b);
#pragma omp parallel for schedule(static) if (cols % 2 == 0)
  for (int64_t k = k0; k < k1; ++k) {
    const GroupSpan span = scale_group_span(granularity, rows, cols, k);
    if (lanes.vector()) lanes.group(span, scales + k, key);
    else quantized_update_group(rule, q, policy, b, span, scales + k, key);
  }
}

}  // namespace eco
