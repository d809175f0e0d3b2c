// CPU driver of the quantized-weight updates: applies src/base/math/eco_update.h's group update
// to the scale groups of a row range of a row-major (rows, cols) matrix, in parallel with OpenMP.
// The per-group math lives in src/base/math; this file only decides who does which group. Its
// CUDA twin is kernels/cuda/optimizer_update.cu.
#pragma once
#include <cmath>
#include <cstdint>

#include "base/error.h"
#include "base/math/eco_update.h"
#include "base/math/scale_groups.h"

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

// f(state, i) for elements [first, last), chunk by chunk over OpenMP threads (chunks: absolute
// multiples of kChunk cut to the range), each chunk's elements in increasing order; each thread
// makes its state with make_state() before its chunks and hands it to done(state) after them
// (one thread at a time).
template <class MakeState, class F, class Done>
void for_each_range_element(int64_t first, int64_t last, MakeState&& make_state, F&& f,
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
      for (int64_t i = i0; i < i1; ++i) f(state, i);
    }
#pragma omp critical
    done(state);
  }
}

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
  float absmax = 0.0f;
  d::for_each_range_element(
      range.begin * cols, range.end_row(rows) * cols, [] { return 0.0f; },
      [&](float& local, int64_t i) {
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
  d::for_each_range_element(
      range.begin * cols, range.end_row(rows) * cols,
      [&] { return GroupDrawCursor<Q>{q}; },  // each thread's chunks in increasing order
      [&](GroupDrawCursor<Q>& draw, int64_t i) {
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
#pragma omp parallel for schedule(static) if (cols % 2 == 0)
  for (int64_t k = k0; k < k1; ++k)
    quantized_update_group(rule, q, policy, b, scale_group_span(granularity, rows, cols, k),
                           scales + k, key);
}

}  // namespace eco
