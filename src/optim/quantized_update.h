// CPU driver of the quantized-weight updates: applies kernels/common/eco_update.h's group update
// to every scale group of a contiguous row-major (rows, cols) matrix, in parallel with OpenMP.
// The per-group math lives in kernels/common; this file only decides who does which group.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "kernels/common/eco_update.h"
#include "core/qtensor.h"

namespace eco {

// quant/qtensor.h's Granularity names the same groups with the same scale layout.
// Rows and 128x128 tiles are independent groups, one per OpenMP iteration. The per-tensor group
// is split over threads instead: pass 1 over chunks with a max-reduction of |theta| (fmaxf is
// exact and order-free, so the scale does not depend on the thread count), then the new scale,
// then pass 2 over the same chunks. The result does not depend on the thread count.
// Packed codes (INT4: two per byte) must not be written by two threads at once: the per-tensor
// chunks start at even elements, and with odd cols (neighbouring rows or tiles may share a byte)
// the groups run one after another.
template <class Rule, class Q, class S, class G>
void quantized_update_matrix(const Rule& rule, const Q& q, UpdatePolicy policy,
                             const QuantizedUpdateBuffers<S, G>& b, float* scales, int64_t rows,
                             int64_t cols, Granularity granularity) {
  ECO_ASSERT(b.codes && b.grad && b.m && scales, "null buffer ({}x{})", rows, cols);
  ECO_ASSERT(policy != UpdatePolicy::Master || b.master, "Master policy without a master weight");
  if constexpr (Rule::kHasV) ECO_ASSERT(b.v, "AdamW without v");
  if (granularity != Granularity::PerTensor) {
    const int64_t groups = scale_group_count(granularity, rows, cols);
#pragma omp parallel for schedule(static) if (cols % 2 == 0)
    for (int64_t k = 0; k < groups; ++k)
      quantized_update_group(rule, q, policy, b, scale_group_span(granularity, rows, cols, k), scales + k);
    return;
  }
  constexpr int64_t kChunk = 4096;  // even, so packed INT4 bytes are never shared (and a multiple
                                    // of 4, so no SR draw group is split between threads)
  const int64_t n = rows * cols;
  const float old_scale = scales[0];
  float absmax = 0.0f;
#pragma omp parallel
  {
    float local = 0.0f;
#pragma omp for schedule(static, kChunk)
    for (int64_t i = 0; i < n; ++i)
      local = fmaxf(local, fabsf(quantized_update_pass1(rule, q, policy, b, i, old_scale)));
#pragma omp critical
    absmax = fmaxf(absmax, local);
  }
  const float new_scale = q.scale_for(absmax);
#pragma omp parallel
  {
    GroupDrawCursor<Q> draw{q};  // each thread's chunks in increasing order
#pragma omp for schedule(static, kChunk)
    for (int64_t i = 0; i < n; ++i)
      quantized_update_pass2(rule, q, policy, b, i, old_scale, new_scale, draw(uint64_t(i)));
  }
  scales[0] = new_scale;
}

template <class Q, class S, class G>
void eco_adamw_update_matrix(const Q& q, UpdatePolicy policy, const AdamWCoeffs& c,
                             const QuantizedUpdateBuffers<S, G>& b, float* scales, int64_t rows,
                             int64_t cols, Granularity granularity) {
  quantized_update_matrix(AdamWRule{c}, q, policy, b, scales, rows, cols, granularity);
}

template <class Q, class S, class G>
void eco_sgdm_update_matrix(const Q& q, UpdatePolicy policy, const SgdmCoeffs& c,
                            const QuantizedUpdateBuffers<S, G>& b, float* scales, int64_t rows,
                            int64_t cols, Granularity granularity) {
  quantized_update_matrix(SgdmRule{c}, q, policy, b, scales, rows, cols, granularity);
}

}  // namespace eco
