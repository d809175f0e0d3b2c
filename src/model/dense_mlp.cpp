// The dense MLP's forward and backward over the Backend interface (H mlp hidden, FC fc rows).
#include "model/dense_mlp.h"

#include "model/moe_mlp.h"

namespace eco {

std::unique_ptr<Mlp> make_mlp(const ModelContext& ctx, const std::string& prefix, int layer,
                              int64_t N) {
  if (ctx.cfg.moe.is_moe_layer(layer)) return std::make_unique<MoeMlp>(ctx, prefix, layer, N);
  return std::make_unique<DenseMlp>(ctx, prefix, layer, N);
}

DenseMlp::DenseMlp(const ModelContext& ctx, const std::string& p, int layer, int64_t N)
    : DenseMlp(ctx, p + "mlp.", fmt::format("h.{}", layer), ctx.cfg.mlp_hidden, ctx.cfg.mlp, N,
               false) {}

DenseMlp::DenseMlp(const ModelContext& ctx, const std::string& params, const std::string& acts,
                   int H, MlpKind act, int64_t N, bool own_input)
    : H_(H), act_kind_(act) {
  fc_ = {ctx.index(params + "fc.weight"), ctx.index(params + "fc.bias")};
  proj_ = {ctx.index(params + "proj.weight"), ctx.index(params + "proj.bias")};
  const DType at = ctx.be.act_dtype();
  const int64_t FC = act == MlpKind::Swiglu ? 2 * int64_t(H) : H;
  fc_out_ = ctx.be.alloc(acts + ".fc", {N, FC}, at, MemCategory::Activations);
  act_ = ctx.be.alloc(acts + ".act", {N, H}, at, MemCategory::Activations);
  if (own_input && ctx.store.storage(size_t(fc_.weight)).act != ActCast::None)
    input_ = ctx.be.alloc(acts + ".in", {N, ctx.cfg.d_model}, at, MemCategory::Activations);
}

void DenseMlp::forward(const ModelContext& ctx, const Tensor& out, const Tensor& normed, int N) {
  const int C = ctx.cfg.d_model, H = H_, FC = act_kind_ == MlpKind::Swiglu ? 2 * H : H;
  const Tensor& in = input_.empty() ? normed : input_;
  linear_forward(ctx, fc_, fc_out_, normed, in, N, C, FC);  // (N, FC)
  if (act_kind_ == MlpKind::Swiglu)
    ctx.be.swiglu_forward(act_, fc_out_, N, H);  // (N, H)
  else
    ctx.be.gelu_forward(act_, fc_out_, int64_t(N) * H);
  linear_forward(ctx, proj_, out, act_, act_, N, H, C);  // (N, C)
}

void DenseMlp::backward(const ModelContext& ctx, const BlockScratch& s, const Tensor& d_normed,
                        const Tensor& d_out, const Tensor& normed, int N) {
  const int C = ctx.cfg.d_model, H = H_, FC = act_kind_ == MlpKind::Swiglu ? 2 * H : H;
  Backend& be = ctx.be;
  be.zero(s.d_act);
  linear_backward(ctx, proj_, s.d_act, d_out, act_, N, H, C);
  be.zero(s.d_fc);
  if (act_kind_ == MlpKind::Swiglu)
    be.swiglu_backward(s.d_fc, s.d_act, fc_out_, N, H);
  else
    be.gelu_backward(s.d_fc, fc_out_, s.d_act, int64_t(N) * H);
  be.zero(d_normed);
  linear_backward(ctx, fc_, d_normed, s.d_fc, input_.empty() ? normed : input_, N, C, FC);
}

}  // namespace eco
