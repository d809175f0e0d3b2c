// Attention half of a block: forward and backward over the Backend interface.
// Shapes: B batch, T time, C d_model, N = B*T; NH query heads, KVH key/value heads, hd head
// size, QKV = (NH + 2 KVH) hd fused qkv rows, A = NH hd attention output width.
#include "model/attention_block.h"

namespace eco {

AttentionBlock::AttentionBlock(const ModelContext& ctx, const std::string& p, int layer, int B,
                               int T) {
  const ModelConfig& m = ctx.cfg;
  const DType dt = ctx.be.dtype(), at = ctx.be.act_dtype();
  const int64_t N = int64_t(B) * T, C = m.d_model, QKV = m.qkv_rows(), A = m.attn_width();
  shape_ = {m.n_head, m.kv_heads(), m.head_dim(), m.layer_is_local(layer) ? m.sliding_window : 0,
            m.query_scalar()};
  rope_theta_ = m.layer_rope_theta(layer);
  norm1_ = {ctx.index(p + "norm1.weight"), ctx.index(p + "norm1.bias")};
  qkv_ = {ctx.index(p + "attn.qkv.weight"), ctx.index(p + "attn.qkv.bias")};
  proj_ = {ctx.index(p + "attn.proj.weight"), ctx.index(p + "attn.proj.bias")};
  auto act = [&](const char* what, std::vector<int64_t> shape, DType dtype) {
    return ctx.be.alloc(fmt::format("h.{}.{}", layer, what), std::move(shape), dtype,
                        MemCategory::Activations);
  };
  norm1_acts_.out = act("norm1", {N, C}, at);
  norm1_acts_.mean = act("norm1_mean", {N}, dt);
  norm1_acts_.rstd = act("norm1_rstd", {N}, dt);
  qkv_out_ = act("qkv", {N, QKV}, at);
  if (m.qk_norm) {
    q_norm_ = ctx.index(p + "attn.q_norm.weight");
    k_norm_ = ctx.index(p + "attn.k_norm.weight");
    qk_normed_ = act("qk_normed", {N, QKV}, at);
    qk_rstd_ = act("qk_rstd", {N, m.n_head + m.kv_heads()}, dt);
  }
  if (m.positions == PositionKind::Rope) qkv_rope_ = act("qkv_rope", {N, QKV}, at);
  att_ = act("att", ctx.be.attention_state_shape(B, m.n_head, T), dt);
  atty_ = act("atty", {N, A}, at);
  // The proj linear's input needs its own buffer when the forward casts it: attention_backward
  // must see the attention output as it was computed.
  const bool cast_proj_in = ctx.store.storage(size_t(proj_.weight)).act != ActCast::None;
  proj_in_ = cast_proj_in ? act("proj_in", {N, A}, at) : atty_;
  if (m.post_norms) {
    post_norm_ = {ctx.index(p + "attn.post_norm.weight"), -1};
    post_acts_.rstd = act("attn_post_norm_rstd", {N}, dt);
    proj_out_ = act("attn_proj_out", {N, C}, at);
  }
}

void AttentionBlock::forward(const ModelContext& ctx, const Tensor& out, int B, int T) {
  const ModelConfig& m = ctx.cfg;
  const AttentionShape& a = shape_;
  const int N = B * T, C = m.d_model, QKV = int(a.qkv_width()), A = int(a.out_width());
  linear_forward(ctx, qkv_, qkv_out_, norm1_acts_.out, norm1_acts_.out, N, C, QKV);  // (N, QKV)
  Tensor qkv = qkv_out_;
  if (m.qk_norm) {
    ctx.be.qk_rmsnorm_forward(qk_normed_, qk_rstd_, qkv, norm_gain(ctx, q_norm_, a.hd, 0),
                              norm_gain(ctx, k_norm_, a.hd, 1), N, a.NH, a.KVH, a.hd, m.norm_eps);
    qkv = qk_normed_;
  }
  if (m.positions == PositionKind::Rope) {
    ctx.be.rope_forward(qkv_rope_, qkv, B, T, a, rope_theta_);
    qkv = qkv_rope_;
  }
  ctx.be.attention_forward(atty_, att_, qkv, B, T, a);  // (N, A)
  if (!m.post_norms) {
    linear_forward(ctx, proj_, out, atty_, proj_in_, N, A, C);  // (N, C)
    return;
  }
  linear_forward(ctx, proj_, proj_out_, atty_, proj_in_, N, A, C);
  post_acts_.out = out;
  norm_forward(ctx, post_acts_, proj_out_, post_norm_, N);  // out = post_norm(proj)
}

void AttentionBlock::backward(const ModelContext& ctx, const BlockScratch& s, const Tensor& d_out,
                              const Tensor& x_in, int B, int T) {
  const ModelConfig& m = ctx.cfg;
  const AttentionShape& a = shape_;
  const int N = B * T, C = m.d_model, QKV = int(a.qkv_width()), A = int(a.out_width());
  Backend& be = ctx.be;
  // resid_mid = x_in + [post_norm](proj(attn(qkv(norm1(x_in))))).
  Tensor d_proj = d_out;
  if (m.post_norms) {
    be.zero(s.d_post);
    norm_backward(ctx, s.d_post, d_out, proj_out_, post_norm_, post_acts_, N);
    d_proj = s.d_post;
  }
  be.zero(s.d_atty);
  linear_backward(ctx, proj_, s.d_atty, d_proj, proj_in_, N, A, C);
  // The attention's input: qkv_rope_ (rope), else the QK-norm's or the projection's output.
  const Tensor att_in = m.positions == PositionKind::Rope ? qkv_rope_
                        : m.qk_norm                       ? qk_normed_
                                                          : qkv_out_;
  // The gradient flows back through [RoPE] and [QK-norm] into d_qkv, each stage into its own
  // buffer: d_qkv_rope -> d_qkv_normed -> d_qkv (a stage absent: the next buffer in line).
  const bool rope = m.positions == PositionKind::Rope;
  const Tensor d_rope_in = m.qk_norm ? s.d_qkv_normed : s.d_qkv;  // RoPE's input gradient
  const Tensor d_att_in = rope ? s.d_qkv_rope : d_rope_in;
  be.zero(d_att_in);
  be.attention_backward(d_att_in, s.d_att, s.d_atty, att_in, atty_, att_, B, T, a);
  if (rope) {
    be.zero(d_rope_in);
    be.rope_backward(d_rope_in, s.d_qkv_rope, B, T, a, rope_theta_);
  }
  if (m.qk_norm) {
    be.zero(s.d_qkv);
    be.qk_rmsnorm_backward(s.d_qkv, ctx.g(q_norm_), ctx.g(k_norm_), s.d_qkv_normed, qkv_out_,
                           norm_gain(ctx, q_norm_, a.hd, 0), norm_gain(ctx, k_norm_, a.hd, 1), qk_rstd_,
                           N, a.NH, a.KVH, a.hd);
  }
  be.zero(s.d_norm);
  linear_backward(ctx, qkv_, s.d_norm, s.d_qkv, norm1_acts_.out, N, C, QKV);
  norm_backward(ctx, s.d_resid, s.d_norm, x_in, norm1_, norm1_acts_, N);  // d_resid = dL/d x_in
}

}  // namespace eco
