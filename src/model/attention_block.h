// The attention half of a transformer block: norm1 -> qkv linear -> [RoPE] -> causal
// self-attention -> proj linear, its parameters, saved activations, forward and backward.
// norm1's forward is fused with the residual add before it, so the caller (the previous block,
// or the model for layer 0) writes normed() and forward() starts at the qkv linear.
#pragma once
#include <string>

#include "model/linear.h"
#include "model/model_context.h"

namespace eco {

class AttentionBlock {
 public:
  // Finds the parameters named prefix + "norm1.*", "attn.qkv.*", "attn.proj.*" and allocates the
  // activations for N = B*T rows.
  AttentionBlock(const ModelContext& ctx, const std::string& prefix, int layer, int B, int T);

  NormRef norm() const { return norm1_; }
  // norm1's output and statistics: the block's input as the attention reads it.
  const NormActs& normed() const { return norm1_acts_; }

  // out (N, C) = proj(attention(qkv(normed()))), ready for the residual add.
  void forward(const ModelContext& ctx, const Tensor& out, int B, int T);
  // d_resid (N, C) holds dL/d(this half's output, added to the residual x_in); adds the
  // gradient through the attention and norm1 to it, so it becomes dL/d x_in.
  void backward(const ModelContext& ctx, const BlockScratch& s, const Tensor& x_in, int B,
                int T);

 private:
  NormRef norm1_;
  LinearRef qkv_, proj_;
  NormActs norm1_acts_;
  Tensor qkv_out_;   // (N, 3C) projection output
  Tensor qkv_rope_;  // (N, 3C) after RoPE (rope positions only)
  Tensor att_;       // attention_state_shape: saved for backward
  Tensor atty_;      // (N, C) attention output
  Tensor proj_in_;   // (N, C) atty as the proj linear sees it (cast), or atty itself
};

}  // namespace eco
