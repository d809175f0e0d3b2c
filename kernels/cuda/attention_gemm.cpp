// The tensor-core attention (attention_gemm.cuh): the sequence of cuBLASLt GEMMs and row kernels.
// Host code, compiled by the host compiler (errors as eco::Error naming the shapes).
//
// Why per sequence, heads batched: head h of sequence b sits at element offset b*T*3C + h*hs of
// qkv, which is no single batch stride over (b, h), so one GEMM over all B*NH heads would need a
// permuted copy of qkv, out, dout and dqkv (four extra passes over the activations). Heads of one
// sequence are one stride apart (hs), as cuBLASLt wants; and the (T, T) scratch is then one
// sequence's, NH * T * ldT, not B times that. The price is B launches per GEMM (8 at GPT-2
// 124M), each still NH * T^2 * hs multiply-adds.
//
// Causality is a mask, not a saving: every GEMM runs the full (T, T) product and the masked
// half is zeros (accepted for this version; a causal kernel would halve the GEMM work).
// Work per (b, h), in T^2 * hs multiply-adds: forward 2 (flash kernel: ~0.5 + 0.5, causal),
// backward 5 (flash: ~3.5 causal: S and dP twice, dq, dk, dv). All on tensor cores here, the
// flash kernel's on fp32 FMAs. At T 1024, hs 64 the GEMMs (K = 64) and the row kernels are
// bound by memory: per sequence (NH 12) forward moves ~125 MB (S written in fp32, its causal
// half read, P written and read), backward ~275 MB. Measured on an H200 at GPT-2 124M's shape
// (B 8, T 1024, C 768, NH 12), per layer: forward 0.39 ms (flash kernel 1.97), backward 0.79 ms
// (flash 6.05).
//
// Precision (as FlashAttention): scores, lse, the softmax and D in fp32; P and dS rounded to bf16
// for the GEMMs that consume them; every GEMM accumulates in fp32; outputs rounded once to bf16
// (dqkv: bf16(acc + dqkv), beta = 1).
#include "kernels/cuda/attention_gemm.cuh"

#include <cmath>
#include <cstdint>

#include "base/error.h"
#include "kernels/cuda/workspace_plan.h"
#include "kernels/cuda/gemm.h"

namespace eco::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kMaxT = 1 << 20;  // keeps NH * T * ldT (and the scratch bytes) far inside int64

bool aligned16(const void* p) { return p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool shape_ok(int B, int T, int C, int NH) {
  return B >= 1 && T >= 1 && NH >= 1 && C >= NH && C % NH == 0 && (C / NH) % 8 == 0 &&
         T <= kMaxT && int64_t(B) * T * NH <= INT32_MAX;
}

size_t round_up_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// 1/sqrt(hs) in fp32, as the CPU twin and the flash kernel compute it.
float score_scale(int hs) { return 1.0f / std::sqrt(float(hs)); }

// One sequence's score matrices inside the caller's scratch: S (NH, T, ld) fp32 first, then
// P (NH, T, ld) bf16 at the next 256-byte boundary.
struct Scratch {
  float* S;
  bf16* P;
  int64_t ld, stride;  // row stride, head stride (elements)
};

// Checks everything attention_gemm_supported does plus the scratch, naming the call's shapes.
// stats: the fp32 (B, NH, T) vectors (lse, D), which need no alignment.
Scratch check(const char* what, std::initializer_list<const void*> matrices,
              std::initializer_list<const void*> stats, void* scratch, size_t scratch_bytes, int B,
              int T, int C, int NH) {
  if (!attention_gemm_supported(B, T, C, NH, matrices))
    runtime_error(
        "{} B={} T={} C={} NH={}: the GEMM path needs B, T, NH >= 1, C % NH == 0, head size "
        "C/NH a multiple of 8, T <= {}, B*T*NH < 2^31 and 16-byte aligned non-null bf16 "
        "buffers (use the flash kernel, attention.cuh, otherwise)",
        what, B, T, C, NH, kMaxT);
  for (const void* p : stats)
    if (p == nullptr) runtime_error("{} B={} T={} C={} NH={}: null lse or D", what, B, T, C, NH);
  const size_t need = attention_gemm_scratch_bytes(T, NH);
  if (scratch == nullptr || reinterpret_cast<uintptr_t>(scratch) % 256 != 0 || scratch_bytes < need)
    runtime_error("{} B={} T={} C={} NH={}: scratch of {} bytes at {} (need {} bytes, 256-aligned)",
                  what, B, T, C, NH, scratch_bytes, scratch, need);
  const int64_t ld = attention_gemm_ld(T), stride = int64_t(T) * ld;
  float* S = static_cast<float*>(scratch);
  bf16* P = reinterpret_cast<bf16*>(static_cast<char*>(scratch) +
                                    round_up_256(sizeof(float) * size_t(NH) * size_t(stride)));
  return {S, P, ld, stride};
}

// A row kernel's status as an eco::Error naming the step and the shapes.
void check_launch(cudaError_t e, const char* step, int b, int B, int T, int C, int NH) {
  if (e != cudaSuccess)
    runtime_error("attention (GEMM path) {} for sequence b={} of B={} T={} C={} NH={}: {} ({})",
                  step, b, B, T, C, NH, cudaGetErrorName(e), cudaGetErrorString(e));
}

}  // namespace

bool attention_gemm_supported(int B, int T, int C, int NH,
                              std::initializer_list<const void*> matrices) {
  if (!shape_ok(B, T, C, NH)) return false;
  for (const void* p : matrices)
    if (!aligned16(p)) return false;
  return true;
}

// The formulas live in kernels/cuda/workspace_plan.h, shared with the --plan planner.
int64_t attention_gemm_ld(int T) { return cuda_ws::attention_ld(T); }

size_t attention_gemm_scratch_bytes(int T, int NH) { return cuda_ws::attention_scores_bytes(T, NH); }

// Index math in row-major terms (GemmEngine::gemm_strided_batched: C_i (M, N) = alpha *
// op(A_i) (M, K) @ op(B_i) (K, N) + beta * C_i, X_i = X + i * stride_x, batch i = head h).
// For sequence b: q = qkv + b*T*3C, k = q + C, v = q + 2C; q_h[i][d] = q[i*3C + h*hs + d]
// (lda 3C, head stride hs), likewise k_h, v_h; S_h[i][j] = S[h*T*ld + i*ld + j] (query i,
// key j); o_h[i][d] = out[b*T*C + i*C + h*hs + d] (ldc C, head stride hs).
void attention_gemm_forward(GemmEngine& gemm, bf16* out, float* lse, const bf16* qkv,
                            void* scratch, size_t scratch_bytes, int B, int T, int C, int NH,
                            cudaStream_t s) {
  const Scratch w = check("attention_gemm_forward", {out, qkv}, {lse}, scratch, scratch_bytes,
                          B, T, C, NH);
  const int hs = C / NH;
  const int64_t ld3 = 3 * int64_t(C);
  for (int b = 0; b < B; ++b) {
    const bf16* q = qkv + int64_t(b) * T * ld3;
    const bf16* k = q + C;
    const bf16* v = q + 2 * C;
    // S_h (T, T) = scale * q_h (T, hs) @ k_h^T: S_h[i][j] = scale * sum_d q_h[i][d] * k_h[j][d].
    // A = q_h stored (M, K) = (T, hs); B = k_h stored (N, K) = (T, hs): trans_b.
    gemm.gemm_strided_batched<bf16, float>(false, true, T, T, hs, score_scale(hs), q, ld3, hs, k,
                                           ld3, hs, 0.0f, w.S, w.ld, w.stride, NH, s);
    // P_h = causal softmax of S_h's rows (zeros for j > i); lse[b, h, i].
    check_launch(attention_causal_softmax(w.P, lse + int64_t(b) * NH * T, w.S, NH, T, w.ld, s),
                 "softmax", b, B, T, C, NH);
    // o_h (T, hs) = P_h (T, T) @ v_h (T, hs): o_h[i][d] = sum_j P_h[i][j] * v_h[j][d].
    // A = P_h stored (M, K) = (T, T), lda ld; B = v_h stored (K, N) = (T, hs); C = out at column
    // h*hs, ldc C: heads interleave within a row but never share an element.
    gemm.gemm_strided_batched<bf16, bf16>(false, false, T, hs, T, 1.0f, w.P, w.ld, w.stride, v,
                                          ld3, hs, 0.0f, out + int64_t(b) * T * C, C, hs, NH, s);
  }
}

// Gradients with s = scale * q k^T (the scaled scores), P = softmax(s), o = P v:
//   dv_h = P_h^T do_h;  dP_h = do_h v_h^T;  ds = P * (dP - D) with D_i = do_i . o_i;
//   dq_h = scale * ds_h k_h;  dk_h = scale * ds_h^T q_h  (scale folded into the GEMMs' alpha).
// dq, dk, dv live in dqkv at the offsets of q, k, v (dq = dqkv + b*T*3C, dk = dq + C, ...).
void attention_gemm_backward(GemmEngine& gemm, bf16* dqkv, float* D, void* scratch,
                             size_t scratch_bytes, const bf16* dout, const bf16* qkv,
                             const bf16* out, const float* lse, int B, int T, int C, int NH,
                             cudaStream_t s) {
  const Scratch w = check("attention_gemm_backward", {dqkv, dout, qkv, out}, {lse, D},
                          scratch, scratch_bytes, B, T, C, NH);
  const int hs = C / NH;
  const int64_t ld3 = 3 * int64_t(C);
  const float scale = score_scale(hs);
  check_launch(attention_rowdot(D, dout, out, B, T, C, NH, s), "D = rowsum(dout * out)", 0, B, T,
               C, NH);
  float* dP = w.S;  // S is dead once P is recomputed: dP takes its place
  for (int b = 0; b < B; ++b) {
    const bf16* q = qkv + int64_t(b) * T * ld3;
    const bf16* k = q + C;
    const bf16* v = q + 2 * C;
    const bf16* dO = dout + int64_t(b) * T * C;  // do_h[i][d] = dO[i*C + h*hs + d]
    bf16* dq = dqkv + int64_t(b) * T * ld3;
    bf16* dk = dq + C;
    bf16* dv = dq + 2 * C;
    const int64_t row0 = int64_t(b) * NH * T;  // lse / D rows of this sequence
    // S_h = scale * q_h @ k_h^T: the forward's call, hence its plan and its bits.
    gemm.gemm_strided_batched<bf16, float>(false, true, T, T, hs, scale, q, ld3, hs, k, ld3, hs,
                                           0.0f, w.S, w.ld, w.stride, NH, s);
    check_launch(attention_causal_probs(w.P, w.S, lse + row0, NH, T, w.ld, s), "probabilities", b,
                 B, T, C, NH);
    // dv_h (T, hs) += P_h^T (T, T) @ do_h (T, hs): dv_h[j][d] += sum_i P_h[i][j] * do_h[i][d].
    // A = P_h stored (K, M) = (queries, keys): trans_a; B = do_h stored (K, N) = (T, hs), ldb C.
    gemm.gemm_strided_batched<bf16, bf16>(true, false, T, hs, T, 1.0f, w.P, w.ld, w.stride, dO, C,
                                          hs, 1.0f, dv, ld3, hs, NH, s);
    // dP_h (T, T) = do_h (T, hs) @ v_h^T: dP_h[i][j] = sum_d do_h[i][d] * v_h[j][d].
    // A = do_h stored (M, K) = (T, hs), lda C; B = v_h stored (N, K) = (T, hs): trans_b.
    gemm.gemm_strided_batched<bf16, float>(false, true, T, T, hs, 1.0f, dO, C, hs, v, ld3, hs,
                                           0.0f, dP, w.ld, w.stride, NH, s);
    // ds_h = P_h * (dP_h - D) in place over P_h (zeros for j > i stay).
    check_launch(attention_softmax_backward(w.P, dP, D + row0, NH, T, w.ld, s), "softmax backward",
                 b, B, T, C, NH);
    const bf16* dS = w.P;
    // dq_h (T, hs) += scale * ds_h (T, T) @ k_h (T, hs): dq_h[i][d] += scale * sum_j ds_h[i][j] *
    // k_h[j][d]. A = ds_h stored (M, K); B = k_h stored (K, N) = (T, hs).
    gemm.gemm_strided_batched<bf16, bf16>(false, false, T, hs, T, scale, dS, w.ld, w.stride, k,
                                          ld3, hs, 1.0f, dq, ld3, hs, NH, s);
    // dk_h (T, hs) += scale * ds_h^T (T, T) @ q_h (T, hs): dk_h[j][d] += scale * sum_i ds_h[i][j]
    // * q_h[i][d]. A = ds_h stored (K, M) = (queries, keys): trans_a; B = q_h stored (K, N).
    gemm.gemm_strided_batched<bf16, bf16>(true, false, T, hs, T, scale, dS, w.ld, w.stride, q, ld3,
                                          hs, 1.0f, dk, ld3, hs, NH, s);
  }
}

}  // namespace eco::cuda
