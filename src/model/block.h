// A transformer block: x -> resid_mid = x + attention(norm1(x)) -> resid_out = resid_mid +
// mlp(norm2(resid_mid)); with post_norms (gemma3) each branch ends in its own RMSNorm before the
// add: resid_mid = x + post_attn(attention(...)), resid_out = resid_mid + post_mlp(mlp(...)). Every residual add is fused with the norm that reads it
// (Backend::residual_norm_forward): norm2 here, and the next block's norm1 (or the final norm),
// which the caller names as `next`.
#pragma once
#include <memory>
#include <string>

#include "model/attention_block.h"
#include "model/mlp.h"

namespace eco {

class Block {
 public:
  Block(const ModelContext& ctx, int layer, int B, int T);

  const AttentionBlock& attention() const { return attn_; }
  const Tensor& output() const { return resid_out_; }  // resid_out (N, C)
  Mlp& mlp() { return *mlp_; }
  const Mlp& mlp() const { return *mlp_; }

  // From x (N, C; attention().normed() already holds norm1(x)) to output(), and next.out =
  // the next norm of output() (next: the next block's norm1 or the final norm).
  void forward(const ModelContext& ctx, const BlockScratch& s, const Tensor& x,
               const NormActs& next, NormRef next_norm, int B, int T);
  // s.d_resid holds dL/d output(); on return it holds dL/d x.
  void backward(const ModelContext& ctx, const BlockScratch& s, const Tensor& x, int B, int T);

 private:
  AttentionBlock attn_;
  Tensor resid_mid_;  // (N, C) x + attn
  NormRef norm2_;
  NormActs norm2_acts_;
  std::unique_ptr<Mlp> mlp_;  // dense or MoE (make_mlp, model/mlp.h)
  NormRef mlp_post_norm_;     // post_norms: "mlp.post_norm.weight"
  NormActs mlp_post_acts_;    // its rstd (its output goes to the scratch)
  Tensor mlp_out_;            // (N, C) the MLP's output, the post-norm's input (post_norms)
  Tensor resid_out_;  // (N, C) resid_mid + mlp
};

}  // namespace eco
