// Host entry points of the optimizer-update kernels (see optimizer_update.cu): the fused update
// of a weight that lives only as codes + scales (docs/eco.md, src/base/math/eco_update.h), and the
// plain fp32 step of an unquantized parameter. Each takes the rule as data (RuleStep,
// src/base/math/optimizer_rules.h) and runs every rule registered there (with_rule).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "base/math/optimizer_rules.h"
#include "base/math/eco_update.h"
#include "base/math/format_quantizer.h"
#include "base/math/scale_groups.h"

namespace eco::cuda {

// ---- the fused quantized update ------------------------------------------------------------
// One quantized (rows, cols) row-major weight: codes (code_bytes(q.format, rows * cols) bytes,
// INT4 two per byte), scales (scale_group_count(granularity, rows, cols) fp32), and grad, m, v,
// master indexed like the codes (element i = row * cols + col). State S: float or bf16 bits.
//
// Bit-identical to the CPU driver (kernels/cpu/quantized_update.h, quantized_update_matrix) on the
// same inputs: codes, scales, m, v and master, for every rule x policy x rounding x state type.
// Both run src/base/math/eco_update.h's element math with the same FormatQuantizer (SR draws
// philox_bits(q.seed, q.step, q.tensor_id, i)): the CPU through quantized_update_pass1/pass2,
// the register kernel through their register form quantized_update_theta/code (the same
// operations, the same bits); the build's --fmad=false / -ffp-contract=off make every operation
// round alike.
//
// Launch assumptions, checked here (cudaErrorInvalidValue otherwise):
//   rows >= 0, 1 <= cols, rows < 2^31, cols < 2^31; codes, grad, m, scales non-null when
//   rows > 0; v non-null for a rule with a second moment (AdamW); master non-null under
//   UpdatePolicy::Master;
//   INT4 with PerRow or Block128 groups: cols even (a code byte never spans two groups);
//   PerTensor: scratch holds quantized_update_scratch_floats(...) floats (else may be null);
//   a forced GroupKernel must fit the groups (group_kernel_fits).
// Any alignment: 16-byte aligned fp32 buffers (8-byte bf16, 4-byte codes, 2-byte INT4 codes)
// with cols % 4 == 0 take vector loads and stores, anything else element-wise ones.
// The stream sees 1 kernel (PerRow, Block128) or 3 (PerTensor).
// Rows: the whole tensor, or a RowRange (below).
int64_t quantized_update_scratch_floats(int64_t rows, int64_t cols, QFormat format,
                                        Granularity granularity);

// The kernel of a PerRow / Block128 update (PerTensor has its own).
//   Registers<N> (PerRow, rows up to kRegisterTeamThreads * N wide): a team of threads updates a
//     row, each thread owning N of its elements (4 consecutive ones per quad) in registers from
//     the loads to the stores: grad, m, v and the codes are read once, m, v and the codes
//     written once (22 B per element for fp32 AdamW + E4M3). Short rows share a block.
//   TwoPass: one block per group, pass 2 re-reads codes, m and v (any group size).
//   Auto: the register kernel with the fewest elements per thread that holds a row, else (rows
//     wider than 8192, Block128 tiles) TwoPass. Tests and the benchmark force the others.
enum class GroupKernel : uint8_t { Auto, TwoPass, Registers4, Registers8, Registers16 };
constexpr int kRegisterTeamThreads = 512;  // a register kernel's threads per row, at most

// Whether `kernel` can update (rows, cols) with these groups (Auto and TwoPass always can;
// PerTensor takes no GroupKernel but Auto).
bool group_kernel_fits(GroupKernel kernel, Granularity granularity, int64_t rows, int64_t cols);

// The update of rows `range` (all rows by default; RowRange: element i draws its SR bits as global
// index i + range.key_offset(cols)). Block128: the range starts and ends on block-row boundaries
// (or the tensor's end); PerTensor: all rows only (ranges take the split below); otherwise
// cudaErrorInvalidValue. S: float or uint16_t (bf16 bits). b.v: for rules with a second moment.
template <class S>
cudaError_t quantized_update(const RuleStep& step, const FormatQuantizer& q, UpdatePolicy policy,
                             const QuantizedUpdateBuffers<S>& b, float* scales, int64_t rows,
                             int64_t cols, Granularity granularity, float* scratch,
                             cudaStream_t s = nullptr, GroupKernel kernel = GroupKernel::Auto,
                             const RowRange& range = {});

// The split update of a PerTensor-scaled weight over row ranges (TensorScaleSplit; the CPU
// driver's quantized_update_tensor_absmax / _finish). absmax: pass 1 over the range, 2 kernels;
// writes the range's split to scratch[0] (the old scale) and scratch[1] (absmax |theta|);
// scratch holds quantized_update_scratch_floats(rows, cols, ...) floats. finish: pass 2 over the
// range with the combined split at `split` (2 device floats: may be the scratch), 1 kernel;
// writes scales[0] = q.scale_for(split[1]). Every range's absmax runs before any range's finish.
template <class S>
cudaError_t quantized_update_tensor_absmax(const RuleStep& step, const FormatQuantizer& q,
                                           UpdatePolicy policy,
                                           const QuantizedUpdateBuffers<S>& b,
                                           const float* scales, int64_t rows, int64_t cols,
                                           const RowRange& range, float* scratch,
                                           cudaStream_t s = nullptr);
template <class S>
cudaError_t quantized_update_tensor_finish(const RuleStep& step, const FormatQuantizer& q,
                                           UpdatePolicy policy,
                                           const QuantizedUpdateBuffers<S>& b, float* scales,
                                           int64_t rows, int64_t cols, const RowRange& range,
                                           const float* split, cudaStream_t s = nullptr);

// ---- the plain fp32 step (embeddings, head, norm gains) ------------------------------------
// param, grad, m, v (n) fp32, updated in place element by element with the rule's plain step
// (optimizer_rules.h): bit-identical to the CPU backend's loops. v: for rules with a second
// moment (else ignored, may be null). float4 loads and stores when every pointer is 16-byte
// aligned, scalar otherwise. Null pointers with n > 0 or n < 0: cudaErrorInvalidValue.
cudaError_t fp32_plain_update(float* param, const float* grad, float* m, float* v, int64_t n,
                              const RuleStep& step, cudaStream_t s = nullptr);

}  // namespace eco::cuda
