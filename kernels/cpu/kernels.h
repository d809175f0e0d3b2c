// The CPU reference kernels: plain functions over raw buffers, shapes written beside them
// (llm.c style). Templated on the scalar: float is the training path, double is used by the
// float64 gradient checks. Matmuls go through BLAS (s/dgemm), loops are OpenMP-parallel.
//
// Conventions:
//  - Row-major everywhere. N = B*T token rows, C = channels, OC = output channels.
//  - Every *_backward ACCUMULATES (+=) into its input gradient and parameter gradients; callers
//    zero gradients before a micro-batch cycle. Parallel reductions are deterministic: the same
//    inputs and thread count give bit-identical results.
//  - Weights are stored (out_features, in_features), as in PyTorch's nn.Linear.
#pragma once
#include <cstdint>

#include "base/math/sum_segment.h"

namespace eco::cpu {

// ---- matmul -------------------------------------------------------------------------------
// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias may be null.
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC);
// dinp (N, C) += dout (N, OC) @ weight (OC, C); dweight (OC, C) += dout^T @ inp;
// dbias (OC) += column sums of dout. dinp and dbias may be null (skipped).
template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC);

// ---- embeddings -----------------------------------------------------------------------------
// out (B*T, C) = wte[tokens[b,t]] + wpe[t]; wpe may be null (no learned positions).
template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn,
                       int C);
// dwte (V, C) += scatter of dout rows by token (deterministic: fixed summation order);
// dwpe (Tn, C) += sum over batch (dwpe may be null).
template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn,
                        int C);

// ---- normalisation --------------------------------------------------------------------------
// LayerNorm over the last dim: out (N, C); mean, rstd (N) saved for backward. bias may be null.
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C, float eps);
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                        const T* weight, const T* mean, const T* rstd, int N, int C);
// RMSNorm: out = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps); rstd (N) saved.
template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, float eps);
template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int N, int C);

// QK-norm: RMSNorm over each hd-wide head of the q (NH heads) and k (KVH heads) parts of
// qkv rows (N, QKV = (NH + 2 KVH) hd), gains wq (hd) and wk (hd); v is copied. rstd (N,
// NH + KVH) saved. Each head is rmsnorm_forward's row. out and inp must not alias.
template <class T>
void qk_rmsnorm_forward(T* out, T* rstd, const T* inp, const T* wq, const T* wk, int N, int NH,
                        int KVH, int hd, float eps);
// dinp (N, QKV) += gradient (v's passes through); dwq, dwk (hd) += gain gradients.
template <class T>
void qk_rmsnorm_backward(T* dinp, T* dwq, T* dwk, const T* dout, const T* inp, const T* wq,
                         const T* wk, const T* rstd, int N, int NH, int KVH, int hd);

// ---- rotary position embedding --------------------------------------------------------------
// qkv (B, Tn, 3C) with q = [0, C), k = [C, 2C), v = [2C, 3C); head h owns [h*hs, (h+1)*hs) of
// each. RoPE rotates q and k of every head, HF/Llama "rotate_half" pairing: (i, i + hs/2) for
// i < hs/2, angle = t * theta^(-2i/hs). v is copied unchanged. out and inp must not alias.
template <class T>
void rope_forward(T* out, const T* inp, int B, int Tn, int C, int NH, float theta);
// dinp += R^T dout (the rotation's transpose); v's gradient passes through.
template <class T>
void rope_backward(T* dinp, const T* dout, int B, int Tn, int C, int NH, float theta);
// The same over grouped-query rows (B, Tn, (NH + 2 KVH) hs): q = NH heads from 0, k = KVH heads
// from NH hs, v = KVH heads from (NH + KVH) hs. rope_forward is the case KVH = NH, hs = C / NH.
template <class T>
void rope_forward_gqa(T* out, const T* inp, int B, int Tn, int NH, int KVH, int hs, float theta);
template <class T>
void rope_backward_gqa(T* dinp, const T* dout, int B, int Tn, int NH, int KVH, int hs,
                       float theta);

// ---- attention ------------------------------------------------------------------------------
// Causal multi-head self-attention with scale 1/sqrt(hs).
// qkv (B, Tn, 3C) -> out (B, Tn, C); att (B, NH, Tn, Tn) keeps the softmax probabilities
// (zeros above the diagonal) for backward. QK^T and att@V go through BLAS per (b, h).
template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH);
// dqkv (B, Tn, 3C) += gradient; scratch must hold B*NH*Tn*Tn elements.
template <class T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B,
                        int Tn, int C, int NH);
// Grouped-query, sliding-window causal attention (src/base/math/attention_shape.h):
// qkv (B, Tn, (NH + 2 KVH) hs) -> out (B, Tn, NH hs); query head h reads kv head
// h / (NH / KVH); window > 0: query t sees keys (t - window, t]; scores scaled by
// q_scalar^-1/2. att (B, NH, Tn, Tn) keeps the probabilities (zeros outside the window).
// attention_forward is the case KVH = NH, hs = C / NH, window 0, q_scalar hs (same bits).
template <class T>
void attention_forward_gqa(T* out, T* att, const T* qkv, int B, int Tn, int NH, int KVH, int hs,
                           int window, float q_scalar);
// dqkv += gradient. A kv head's gradient sums its group's query heads in head order, one
// (b, kv head) per thread: deterministic for any thread count.
template <class T>
void attention_backward_gqa(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B,
                            int Tn, int NH, int KVH, int hs, int window, float q_scalar);

// ---- MLP activations ------------------------------------------------------------------------
// out (n) = gelu_tanh(inp); dinp += gelu_tanh'(inp) * dout.
template <class T>
void gelu_forward(T* out, const T* inp, int64_t n);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n);
// SwiGLU: inp (N, 2H) holds [gate | up] per row; out (N, H) = silu(gate) * up.
template <class T>
void swiglu_forward(T* out, const T* inp, int N, int H);
template <class T>
void swiglu_backward(T* dinp, const T* dout, const T* inp, int N, int H);
// GeGLU (Gemma): as SwiGLU with gelu_tanh for silu: out (N, H) = gelu_tanh(gate) * up.
template <class T>
void geglu_forward(T* out, const T* inp, int N, int H);
template <class T>
void geglu_backward(T* dinp, const T* dout, const T* inp, int N, int H);

// ---- residual -------------------------------------------------------------------------------
// out (n) = a + b. (Its backward is an accumulate of dout into both inputs: see accumulate.)
template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t n);
// dst (n) += src.
template <class T>
void accumulate(T* dst, const T* src, int64_t n);

// ---- classifier -----------------------------------------------------------------------------
// Fused softmax + cross-entropy. logits (N, V), targets (N). losses (N) = -log softmax[target].
// If dlogits is non-null: dlogits (N, V) = (softmax - onehot(target)) * dloss, where dloss is
// the gradient of the reported loss w.r.t. each row's loss (1/N for a mean, times 1/grad_accum).
// dlogits may alias logits (computed in place, no probabilities materialised elsewhere).
// Targets < 0 are ignored (loss 0, gradient 0).
template <class T>
void crossentropy_forward_backward(T* losses, T* dlogits, const T* logits,
                                   const int32_t* targets, int N, int V, float dloss);

// ---- reductions -----------------------------------------------------------------------------
// sum of squares of x (n), accumulated in double, deterministic.
template <class T>
double sum_squares(const T* x, int64_t n);
// out (count) [k] = sum of x[i]^2 in double over segment k, i in [segs[k].offset, + length):
// 8 lanes (element j of the segment to lane j % 8, the ragged tail to lane 0) added in lane
// order, so each segment's bits depend on its length (and values) alone, not on its offset, the
// other segments or the thread count. Segments must lie inside x (not checked here).
template <class T>
void sum_squares_segments(double* out, const T* x, const SumSegment* segs, int64_t count);
// x (n) *= s
template <class T>
void scale_inplace(T* x, float s, int64_t n);

}  // namespace eco::cpu
