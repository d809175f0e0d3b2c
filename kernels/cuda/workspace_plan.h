// The CUDA backend's layout decisions (activation dtype, attention state, logits stride) and its
// workspaces for a model's largest shapes: what CudaBackend uses and reserves, and what --plan
// reports for device: cuda without a GPU (the planning backend asks the same functions). Plain
// C++ (workspace_plan.cpp too), so that CUDA and CPU-only builds compute the same bytes.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/tensor.h"

namespace eco {

struct WorkspaceShapes;      // base/backend.h
enum class CudaAttention;    // kernels/cuda/cuda_attention.h

namespace cuda_ws {

// ---- layouts --------------------------------------------------------------------------------
// Activations, their gradients and the logits are bf16 (Backend::act_dtype).
constexpr DType kActivationDType = DType::BF16;
// The MoE dispatch starts each expert's rows on a multiple of 16 (Backend::moe_row_align): the
// FP8 forward GEMM (cuBLASLt, row-wise scales) takes whole 16-row tiles, and a padded segment
// costs at most 15 zero rows per expert, where scaling the rows in a separate kernel after a
// unit-scaled GEMM would cost a pass over every output.
constexpr int kMoeRowAlign = 16;
// attention_forward saves each query's log-sum-exp (B, NH, T), not the probabilities.
inline std::vector<int64_t> attention_state_shape(int B, int NH, int T) { return {B, NH, T}; }

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
// The row stride of the logits (Backend::logits_stride).
inline int logits_stride(int V, int C) { return pads_output_channels(C, V) ? padded_channels(V) : V; }

// FP8 forward: one row's activation codes (N, C) bytes, 256-byte aligned, then N fp32 scales.
inline size_t fp8_activation_bytes(int64_t N, int64_t C) {
  return round_up_256(size_t(N) * size_t(C)) + sizeof(float) * size_t(N);
}

// ---- workspaces -----------------------------------------------------------------------------
// Their names in the memory ledger.
constexpr const char* kCublasLtWorkspaceName = "cublaslt workspace";
constexpr const char* kAttentionScoresName = "attention scores (GEMM path)";
constexpr const char* kWeightBf16Name = "bf16 weight for the GEMMs";
constexpr const char* kFp8ActivationsName = "FP8 activation codes + scales";

// The reservation for a model's shapes, in bytes per workspace (0: not needed).
// fp8_accumulator_sm89: the fp32 sums (N, widest OC) of sm_89's row-scaled FP8 forward (a unit-
// scaled FP8 GEMM, then the scales; GemmEngine), reserved only on compute capability 8.9.
struct Reservation {
  size_t attention_scores = 0, weight_bf16 = 0, fp8_activations = 0, fp8_accumulator_sm89 = 0;
};
Reservation reservation(const WorkspaceShapes& w);

// Whether the attention scores workspace is reserved: whether the GEMM path runs the model's
// attention, given the request (ECO_CUDA_ATTENTION) and whether the mma path takes its shapes.
bool reserves_attention_scores(CudaAttention request, bool mma_takes_shapes);

}  // namespace cuda_ws
}  // namespace eco
