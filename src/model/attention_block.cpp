// Attention half of a block: forward and backward over the Backend interface.
// Shapes: B batch, T time, C d_model, NH heads, N = B*T.
#include "model/attention_block.h"

namespace eco {

AttentionBlock::AttentionBlock(const ModelContext& ctx, const std::string& p, int layer, int B,
                               int T) {
  const ModelConfig& m = ctx.cfg;
  const DType dt = ctx.be.dtype(), at = ctx.be.act_dtype();
  const int64_t N = int64_t(B) * T, C = m.d_model;
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
  qkv_out_ = act("qkv", {N, 3 * C}, at);
  if (m.positions == PositionKind::Rope) qkv_rope_ = act("qkv_rope", {N, 3 * C}, at);
  att_ = act("att", ctx.be.attention_state_shape(B, m.n_head, T), dt);
  atty_ = act("atty", {N, C}, at);
  // The proj linear's input needs its own buffer when the forward casts it: attention_backward
  // must see the attention output as it was computed.
  const bool cast_proj_in = ctx.store.storage(size_t(proj_.weight)).act != ActCast::None;
  proj_in_ = cast_proj_in ? act("proj_in", {N, C}, at) : atty_;
}

void AttentionBlock::forward(const ModelContext& ctx, const Tensor& out, int B, int T) {
  const ModelConfig& m = ctx.cfg;
  const int N = B * T, C = m.d_model, NH = m.n_head;
  linear_forward(ctx, qkv_, qkv_out_, norm1_acts_.out, norm1_acts_.out, N, C, 3 * C);  // (N, 3C)
  Tensor qkv = qkv_out_;
  if (m.positions == PositionKind::Rope) {
    ctx.be.rope_forward(qkv_rope_, qkv_out_, B, T, C, NH, m.rope_theta);
    qkv = qkv_rope_;
  }
  ctx.be.attention_forward(atty_, att_, qkv, B, T, C, NH);      // (N, C)
  linear_forward(ctx, proj_, out, atty_, proj_in_, N, C, C);  // (N, C)
}

void AttentionBlock::backward(const ModelContext& ctx, const BlockScratch& s,
                              const Tensor& x_in, int B, int T) {
  const ModelConfig& m = ctx.cfg;
  const int N = B * T, C = m.d_model, NH = m.n_head;
  Backend& be = ctx.be;
  // resid_mid = x_in + proj(attn(qkv(norm1(x_in)))).
  be.zero(s.d_atty);
  linear_backward(ctx, proj_, s.d_atty, s.d_resid, proj_in_, N, C, C);
  if (m.positions == PositionKind::Rope) {
    be.zero(s.d_qkv_rope);
    be.attention_backward(s.d_qkv_rope, s.d_att, s.d_atty, qkv_rope_, atty_, att_, B, T, C, NH);
    be.zero(s.d_qkv);
    be.rope_backward(s.d_qkv, s.d_qkv_rope, B, T, C, NH, m.rope_theta);
  } else {
    be.zero(s.d_qkv);
    be.attention_backward(s.d_qkv, s.d_att, s.d_atty, qkv_out_, atty_, att_, B, T, C, NH);
  }
  be.zero(s.d_norm);
  linear_backward(ctx, qkv_, s.d_norm, s.d_qkv, norm1_acts_.out, N, C, 3 * C);
  norm_backward(ctx, s.d_resid, s.d_norm, x_in, norm1_, norm1_acts_, N);  // d_resid = dL/d x_in
}

}  // namespace eco
