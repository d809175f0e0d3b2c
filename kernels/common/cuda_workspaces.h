// The CUDA backend's workspaces for a model's largest shapes: what CudaBackend reserves when the
// model is built, and what --plan reports for device: cuda without a GPU (the planning backend).
// Plain C++ so that both sides (and builds without CUDA) compute the same bytes.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace eco {

// The largest shapes a model runs, reported once by the Transformer (Backend::reserve_workspaces).
struct WorkspaceShapes {
  int64_t tokens = 0;             // B * T rows of activations
  int seq_len = 0, d_model = 0, n_head = 0, vocab = 0;
  int64_t widest_linear_in = 0;   // the largest C of a block linear's input (d_model or mlp hidden)
  int64_t widest_linear_out = 0;  // the largest OC of a block linear (3 d_model or the mlp's fc)
  int64_t largest_weight = 0;     // elements of the largest weight any GEMM reads (the head's)
  bool fp8_activations = false;   // the forward casts block-linear inputs to E4M3 per row
};

namespace cuda_ws {

constexpr size_t kCublasLtWorkspaceBytes = size_t(32) << 20;  // Hopper's recommendation

inline size_t round_up_256(size_t n) { return (n + 255) / 256 * 256; }

// Tensor-core attention (kernels/cuda/attention_gemm.*): one sequence's scores S (NH, T, ld) fp32
// then, 256-byte aligned, its probabilities P (NH, T, ld) bf16, ld = T rounded up to 8.
inline int64_t attention_ld(int T) { return (int64_t(T) + 7) / 8 * 8; }
inline size_t attention_scores_bytes(int T, int NH) {
  const size_t elems = size_t(NH) * size_t(T) * size_t(attention_ld(T));
  return round_up_256(sizeof(float) * elems) + sizeof(uint16_t) * elems;
}
// Whether attention can take the GEMM path at all (head size a multiple of 8; the pointers'
// alignment is checked per call).
inline bool attention_gemm_shape_ok(int C, int NH) { return NH > 0 && C % NH == 0 && (C / NH) % 8 == 0; }

// A vocabulary that is not a multiple of 8 (GPT-2's 50257) gets logits rows padded to a multiple
// of 64 columns (Backend::logits_stride), and the head's GEMMs a bf16 weight with as many rows,
// the extra ones zero (cuda_backend.cpp, head_forward / head_backward).
inline int padded_channels(int OC) { return (OC + 63) / 64 * 64; }
inline bool pads_output_channels(int C, int OC) { return OC % 8 != 0 && C % 8 == 0; }

// FP8 forward: one row's activation codes (N, C) bytes, 256-byte aligned, then N fp32 scales.
inline size_t fp8_activation_bytes(int64_t N, int64_t C) {
  return round_up_256(size_t(N) * size_t(C)) + sizeof(float) * size_t(N);
}

// The reservation for a model's shapes, in bytes per workspace (0: not needed).
// fp8_accumulator_sm89: the fp32 sums (N, widest OC) of sm_89's row-scaled FP8 forward (a unit-
// scaled FP8 GEMM, then the scales; GemmEngine), reserved only on compute capability 8.9.
struct Reservation {
  size_t attention_scores = 0, weight_bf16 = 0, fp8_activations = 0, fp8_accumulator_sm89 = 0;
};
inline Reservation reservation(const WorkspaceShapes& w) {
  Reservation r;
  if (attention_gemm_shape_ok(w.d_model, w.n_head))
    r.attention_scores = attention_scores_bytes(w.seq_len, w.n_head);
  int64_t weight = w.largest_weight;
  if (pads_output_channels(w.d_model, w.vocab))
    weight = std::max<int64_t>(weight, int64_t(padded_channels(w.vocab)) * w.d_model);
  r.weight_bf16 = sizeof(uint16_t) * size_t(weight);
  if (w.fp8_activations) {
    r.fp8_activations = fp8_activation_bytes(w.tokens, w.widest_linear_in);
    r.fp8_accumulator_sm89 = sizeof(float) * size_t(w.tokens) * size_t(w.widest_linear_out);
  }
  return r;
}

}  // namespace cuda_ws
}  // namespace eco
