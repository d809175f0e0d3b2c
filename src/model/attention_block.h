// The attention half of a transformer block: norm1 -> qkv linear -> [QK-norm] -> [RoPE] ->
// causal self-attention (grouped-query, sliding-window in a local layer) -> proj linear
// [-> post-norm], its parameters, saved activations, forward and backward.
// norm1's forward is fused with the residual add before it, so the caller (the previous block,
// or the model for layer 0) writes normed() and forward() starts at the qkv linear.
#pragma once
#include <string>

#include "model/linear.h"
#include "model/model_context.h"

namespace eco {

class AttentionBlock {
 public:
  // Finds the parameters named prefix + "norm1.*", "attn.qkv.*", "attn.proj.*" (and
  // "attn.{q,k}_norm.weight", "attn.post_norm.weight" where the family has them) and allocates
  // the activations for N = B*T rows.
  AttentionBlock(const ModelContext& ctx, const std::string& prefix, int layer, int B, int T);

  NormRef norm() const { return norm1_; }
  // norm1's output and statistics: the block's input as the attention reads it.
  const NormActs& normed() const { return norm1_acts_; }

  // out (N, C) = [post_norm](proj(attention(qkv(normed())))), ready for the residual add.
  void forward(const ModelContext& ctx, const Tensor& out, int B, int T);
  // d_out (N, C) holds dL/d(this half's output, added to the residual x_in); the gradient
  // through the attention and norm1 is added to d_resid (N, C), which holds dL/d x_in from the
  // residual path on entry. d_out may be d_resid itself (no post-norm).
  void backward(const ModelContext& ctx, const BlockScratch& s, const Tensor& d_out,
                const Tensor& x_in, int B, int T);
  // The post-norm (post_norms), else weight -1.
  NormRef post_norm() const { return post_norm_; }
  // This layer's attention: heads, head size, window (local layers) and query scale.
  const AttentionShape& shape() const { return shape_; }

 private:
  AttentionShape shape_;
  float rope_theta_ = 0;
  NormRef norm1_, post_norm_;
  int q_norm_ = -1, k_norm_ = -1;
  LinearRef qkv_, proj_;
  NormActs norm1_acts_;
  NormActs post_acts_;  // post_norms: out unused (it goes to the caller's buffer), rstd saved
  Tensor qkv_out_;      // (N, QKV) projection output
  Tensor qk_normed_;    // (N, QKV) after the QK-norm (qk_norm only)
  Tensor qk_rstd_;      // (N, NH + KVH) the QK-norm's statistics
  Tensor qkv_rope_;     // (N, QKV) after RoPE (rope positions only)
  Tensor att_;          // attention_state_shape: saved for backward
  Tensor atty_;         // (N, A) attention output
  Tensor proj_in_;      // (N, A) atty as the proj linear sees it (cast), or atty itself
  Tensor proj_out_;     // (N, C) the proj output, the post-norm's input (post_norms only)
};

}  // namespace eco
