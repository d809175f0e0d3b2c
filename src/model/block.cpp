// A block's forward and backward: the attention half, the fused residual + norm2, the MLP half.
#include "model/block.h"

namespace eco {

Block::Block(const ModelContext& ctx, int layer, int B, int T)
    : attn_(ctx, fmt::format("h.{}.", layer), layer, B, T) {
  const std::string p = fmt::format("h.{}.", layer);
  const DType dt = ctx.be.dtype(), at = ctx.be.act_dtype();
  const int64_t N = int64_t(B) * T, C = ctx.cfg.d_model;
  auto act = [&](const char* what, std::vector<int64_t> shape, DType dtype) {
    return ctx.be.alloc(fmt::format("h.{}.{}", layer, what), std::move(shape), dtype,
                        MemCategory::Activations);
  };
  resid_mid_ = act("resid_mid", {N, C}, at);
  norm2_ = {ctx.index(p + "norm2.weight"), ctx.index(p + "norm2.bias")};
  norm2_acts_.out = act("norm2", {N, C}, at);
  norm2_acts_.mean = act("norm2_mean", {N}, dt);
  norm2_acts_.rstd = act("norm2_rstd", {N}, dt);
  mlp_ = make_mlp(ctx, p, layer, N);
  resid_out_ = act("resid_out", {N, C}, at);
}

void Block::forward(const ModelContext& ctx, const BlockScratch& s, const Tensor& x,
                    const NormActs& next, NormRef next_norm, int B, int T) {
  const int N = B * T;
  attn_.forward(ctx, s.out_c, B, T);
  residual_norm_forward(ctx, resid_mid_, norm2_acts_, x, s.out_c, norm2_, N);
  mlp_->forward(ctx, s.out_c, norm2_acts_.out, N);
  residual_norm_forward(ctx, resid_out_, next, resid_mid_, s.out_c, next_norm, N);
}

void Block::backward(const ModelContext& ctx, const BlockScratch& s, const Tensor& x, int B,
                     int T) {
  const int N = B * T;
  // MLP branch: resid_out = resid_mid + mlp(norm2(resid_mid)).
  mlp_->backward(ctx, s, s.d_norm, s.d_resid, norm2_acts_.out, N);
  norm_backward(ctx, s.d_resid, s.d_norm, resid_mid_, norm2_, norm2_acts_, N);  // dL/d resid_mid
  // Attention branch: resid_mid = x + attn(norm1(x)).
  attn_.backward(ctx, s, x, B, T);  // d_resid = dL/d x
}

}  // namespace eco
