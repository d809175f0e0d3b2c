// The CUDA backend's workspace reservation for a model's shapes (plain C++: workspace_plan.h).
#include "kernels/cuda/workspace_plan.h"

#include "kernels/cuda/cuda_attention.h"
#include "base/backend.h"

namespace eco::cuda_ws {

Reservation reservation(const WorkspaceShapes& w) {
  Reservation r;
  // Only plain multi-head attention takes the GEMM path (grouped-query and windowed attention run
  // the flash or mma kernels, which need no score matrices).
  if (w.plain_attention && attention_gemm_shape_ok(w.attention_width(), w.n_head))
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

bool reserves_attention_scores(CudaAttention request, bool mma_takes_shapes) {
  return choose_cuda_attention(request, mma_takes_shapes, true) == CudaAttention::Gemm;
}

}  // namespace eco::cuda_ws
