// A block's forward and backward: the attention half, the fused residual + norm2, the MLP half.
#include "model/block.h"

namespace eco {

namespace {
// s.d_post = dL/d(post-norm's input inp) from s.d_resid, the gradient at its output.
void post_norm_backward(const ModelContext& ctx, const BlockScratch& s, const Tensor& inp,
                               NormRef p, const NormActs& a, int N) {
  ctx.be.zero(s.d_post);
  norm_backward(ctx, s.d_post, s.d_resid, inp, p, a, N);
}
}  // namespace

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
  if (ctx.cfg.post_norms) {
    mlp_post_norm_ = {ctx.index(p + "mlp.post_norm.weight"), -1};
    mlp_post_acts_.rstd = act("mlp_post_norm_rstd", {N}, dt);
    mlp_out_ = act("mlp_out", {N, C}, at);
  }
}

void Block::forward(const ModelContext& ctx, const BlockScratch& s, const Tensor& x,
                    const NormActs& next, NormRef next_norm, int B, int T) {
  const int N = B * T;
  attn_.forward(ctx, s.out_c, B, T);
  residual_norm_forward(ctx, resid_mid_, norm2_acts_, x, s.out_c, norm2_, N);
  if (ctx.cfg.post_norms) {  // out_c = post_mlp(mlp(norm2(resid_mid)))
    mlp_->forward(ctx, mlp_out_, norm2_acts_.out, N);
    NormActs post = mlp_post_acts_;
    post.out = s.out_c;
    norm_forward(ctx, post, mlp_out_, mlp_post_norm_, N);
  } else {
    mlp_->forward(ctx, s.out_c, norm2_acts_.out, N);
  }
  residual_norm_forward(ctx, resid_out_, next, resid_mid_, s.out_c, next_norm, N);
}

void Block::backward(const ModelContext& ctx, const BlockScratch& s, const Tensor& x, int B,
                     int T) {
  const int N = B * T;
  // MLP branch: resid_out = resid_mid + mlp(norm2(resid_mid)).
  Tensor d_mlp_out = s.d_resid;
  if (ctx.cfg.post_norms) {
    post_norm_backward(ctx, s, mlp_out_, mlp_post_norm_, mlp_post_acts_, N);
    d_mlp_out = s.d_post;
  }
  mlp_->backward(ctx, s, s.d_norm, d_mlp_out, norm2_acts_.out, N);
  norm_backward(ctx, s.d_resid, s.d_norm, resid_mid_, norm2_, norm2_acts_, N);  // dL/d resid_mid
  // Attention branch: resid_mid = x + attn(norm1(x)).
  attn_.backward(ctx, s, s.d_resid, x, B, T);  // d_resid = dL/d x
}

}  // namespace eco
