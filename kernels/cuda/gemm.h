// GemmEngine: every GEMM of the CUDA backend through cuBLASLt, behind row-major entry points that
// mirror the CPU twins (kernels/cpu/kernels.h): BF16 with fp32 accumulation (linear layers,
// strided batched for attention) and the FP8 E4M3 forward of quantized layers.
//
// Conventions (as in the CPU twins): row-major everywhere, N = token rows, C = in channels,
// OC = out channels, weights stored (OC, C) like nn.Linear. cuBLASLt is column-major; a
// row-major C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T, i.e. with the
// operands swapped and no copies. The linear forward thus runs as cuBLAS "TN" (both operands
// K-major), which is also the only layout FP8 accepts on sm_89/sm_90 (cuBLASLt's FP8 rules).
//
// One engine owns one cuBLASLt handle, one 32 MiB workspace and a plan cache: a plan (descriptors
// + the algorithm cublasLtMatmulAlgoGetHeuristic picked) per (shape, leading dims, batch, types,
// transposes, scale mode, epilogue, pointer alignments); the heuristic runs once per key.
// Not thread-safe, and the workspace is shared by all calls: use one engine per stream (calls on
// different streams of one engine must not overlap).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "kernels/cuda/workspace_plan.h"
#include "base/math/scale_groups.h"

namespace eco::cuda {

class GemmEngine {
 public:
  static constexpr size_t kWorkspaceBytes = cuda_ws::kCublasLtWorkspaceBytes;  // 32 MiB

  // Binds to the current CUDA device (cudaGetDevice) and reads its compute capability.
  GemmEngine();
  ~GemmEngine();
  GemmEngine(GemmEngine&&) noexcept;
  GemmEngine& operator=(GemmEngine&&) noexcept;
  GemmEngine(const GemmEngine&) = delete;
  GemmEngine& operator=(const GemmEngine&) = delete;

  // ---- BF16 linear layer, fp32 accumulation (CUBLAS_COMPUTE_32F) ---------------------------
  // out (N, OC) bf16 = inp (N, C) @ weight (OC, C)^T + bias (OC); bias (fp32) may be null.
  // The bias goes through cuBLASLt's BIAS epilogue, which reads it in the output type: it is
  // rounded to bf16 first (a device-side copy in the engine), then added to the fp32 accumulator
  // before the single rounding of the output: out = bf16(acc + bf16(bias)). Where cuBLASLt
  // refuses the epilogue, the bias is broadcast into out and the GEMM runs with beta = 1: the
  // same result (see bias_epilogue_fallbacks()).
  void matmul_forward(__nv_bfloat16* out, const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                      const float* bias, int N, int C, int OC, cudaStream_t s = nullptr);

  // dinp (N, C) bf16 = dout (N, OC) @ weight (OC, C) (+ dinp when accumulate_dinp);
  // dweight (OC, C) fp32 += dout^T @ inp (always accumulates: beta = 1, like the CPU twin);
  // dbias (OC) fp32 += column sums of dout (deterministic two-pass reduction, see gemm.cu).
  // dinp and dbias may be null (skipped). BF16 operands, fp32 accumulation, fast accumulation
  // does not apply (no FP8 here).
  void matmul_backward(__nv_bfloat16* dinp, float* dweight, float* dbias, const __nv_bfloat16* dout,
                       const __nv_bfloat16* inp, const __nv_bfloat16* weight, int N, int C, int OC,
                       bool accumulate_dinp, cudaStream_t s = nullptr);

  // ---- FP8 E4M3 forward of a quantized layer -----------------------------------------------
  // out (N, OC) bf16 = (x_codes (N, C) * x_scales) @ (w_codes (OC, C) * w_scales)^T + bias (OC)
  // with codes E4M3 bytes (src/base/math/qformat.h) and scales the fp32 dequantization
  // multipliers eco::quantize / quantize_rows store (absmax / 448: value = decode(code) * scale).
  //   scales == PerRow:    x_scales (N), w_scales (OC): cuBLASLt OUTER_VEC_32F on sm_90+. On
  //     sm_89 (no OUTER_VEC), the per-tensor-scaled GEMM with unit scales writes the raw sums to
  //     an fp32 accumulator (N, OC) owned by the engine, and scale_outer_to_bf16 applies
  //     x_scales[n] * w_scales[oc] and the bias: the same products, one more pass over the
  //     output.
  //   scales == PerTensor: x_scales (1), w_scales (1): SCALAR_32F, sm_89+.
  // bias (fp32, may be null) is rounded to bf16 as in matmul_forward. Fast accumulation is on
  // (forward only, as TransformerEngine / torchao do).
  // Checked on the host (throws eco::Error naming the shapes; callers pad): N, C, OC multiples of
  // 16; x_codes, w_codes and out 16-byte aligned; scales non-null; compute capability 8.9+.
  // Block128 scales are not supported here.
  void matmul_forward_fp8(__nv_bfloat16* out, const uint8_t* x_codes, const float* x_scales,
                          const uint8_t* w_codes, const float* w_scales, const float* bias, int N,
                          int C, int OC, Granularity scales, cudaStream_t s = nullptr);

  // Whether PerRow FP8 runs as a unit-scaled GEMM + scale_outer_to_bf16 (sm_89's route): true
  // below sm_90; set_rowwise_fp8_epilogue(true) takes that route on sm_90 too (tests, benchmarks).
  bool rowwise_fp8_epilogue() const;
  void set_rowwise_fp8_epilogue(bool on);
  // Allocates the route's fp32 accumulator for up to `elems` outputs now (the backend does, with
  // the model's largest FP8 GEMM, so that it never grows mid-run); returns its bytes.
  size_t reserve_fp8_accumulator(size_t elems);

  // ---- general (strided batched) GEMM, row-major like kernels/cpu/gemm.h --------------------
  // For i < batch:  C_i (M, N) = alpha * op(A_i) (M, K) @ op(B_i) (K, N) + beta * C_i
  // with X_i = X + i * stride_x (elements). A is stored (M, K) if !trans_a else (K, M), with row
  // stride lda (elements); B is stored (K, N) if !trans_b else (N, K), row stride ldb; C (M, N)
  // row stride ldc. Needs lda >= cols of A as stored (etc.), batch >= 1, K >= 1; M or N = 0 is a
  // no-op. beta = 0 does not read C (it may hold NaNs). fp32 accumulation throughout.
  // Instantiated for (AB, CD) = (bf16, bf16), (bf16, float), (float, float); float x float is
  // true fp32 (no TF32).
  // Attention example (one sequence b, heads batched; q, k, v inside qkv (T, 3C), head h at
  // column offset h*hs): att_h (T, T) = scale * q_h @ k_h^T is
  //   gemm_strided_batched(false, true, T, T, hs, scale, q, 3C, hs, k, 3C, hs, 0, att, T, T*T, NH)
  template <class AB, class CD>
  void gemm_strided_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                            const AB* A, int64_t lda, int64_t stride_a, const AB* B, int64_t ldb,
                            int64_t stride_b, float beta, CD* C, int64_t ldc, int64_t stride_c,
                            int batch, cudaStream_t s = nullptr);
  template <class AB, class CD>
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const AB* A, int64_t lda,
            const AB* B, int64_t ldb, float beta, CD* C, int64_t ldc, cudaStream_t s = nullptr) {
    gemm_strided_batched(trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1,
                         s);
  }

  // ---- introspection -------------------------------------------------------------------------
  // Number of cublasLtMatmulAlgoGetHeuristic calls so far (one per new plan key) and plan keys
  // held (including keys cuBLASLt refused).
  int64_t heuristic_queries() const;
  int64_t cached_plans() const;
  // Calls whose bias went through the fallback (bias broadcast into the output, then beta = 1)
  // because cuBLASLt refused the BIAS epilogue for that GEMM. Same result, one more pass over
  // the output.
  int64_t bias_epilogue_fallbacks() const;
  // Compute capability of the bound device as 10 * major + minor (90 for H100/H200).
  int compute_capability() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- the small kernels the engine uses (gemm.cu); usable directly -----------------------------
// out (rows, cols) bf16 = bf16(acc * row_scales[r] * col_scales[c] + bias[c]) (bias bf16, may
// be null; acc fp32 (rows, cols)): the row-scaled FP8 GEMM's scaling on sm_89.
cudaError_t scale_outer_to_bf16(__nv_bfloat16* out, const float* acc, const float* row_scales,
                               const float* col_scales, const __nv_bfloat16* bias, int rows,
                               int cols, cudaStream_t s = nullptr);

// out (rows, cols) bf16 with row stride ld: every row = bias (cols).
cudaError_t fill_rows_with_bias(__nv_bfloat16* out, const __nv_bfloat16* bias, int rows, int cols,
                                int64_t ld, cudaStream_t s = nullptr);

// dbias (OC) fp32 += column sums of dout (N, OC) bf16, summed in fp32 in a fixed order
// (deterministic: the order depends only on N and OC). partials must hold
// column_sum_partials(N, OC) floats of scratch. Any alignment; N, OC >= 0.
int64_t column_sum_partials(int N, int OC);
cudaError_t column_sums_accumulate(float* dbias, float* partials, const __nv_bfloat16* dout, int N,
                                   int OC, cudaStream_t s = nullptr);

}  // namespace eco::cuda
