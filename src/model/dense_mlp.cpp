// The dense MLP's forward and backward over the Backend interface (H mlp hidden, FC fc rows).
#include "model/dense_mlp.h"

#include "model/moe_mlp.h"

namespace eco {

std::unique_ptr<Mlp> make_mlp(const ModelContext& ctx, const std::string& prefix, int layer,
                              int64_t N) {
  if (ctx.cfg.moe.is_moe_layer(layer)) return std::make_unique<MoeMlp>(ctx, prefix, layer, N);
  return std::make_unique<DenseMlp>(ctx, prefix, layer, N);
}

void mlp_activation_forward(Backend& be, MlpKind k, const Tensor& act, const Tensor& fc, int N,
                            int H) {
  switch (k) {
    case MlpKind::Gelu: be.gelu_forward(act, fc, int64_t(N) * H); break;
    case MlpKind::Swiglu: be.swiglu_forward(act, fc, N, H); break;
    case MlpKind::Geglu: be.geglu_forward(act, fc, N, H); break;
  }
}

void mlp_activation_backward(Backend& be, MlpKind k, const Tensor& dfc, const Tensor& dact,
                             const Tensor& fc, int N, int H) {
  switch (k) {
    case MlpKind::Gelu: be.gelu_backward(dfc, fc, dact, int64_t(N) * H); break;
    case MlpKind::Swiglu: be.swiglu_backward(dfc, dact, fc, N, H); break;
    case MlpKind::Geglu: be.geglu_backward(dfc, dact, fc, N, H); break;
  }
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
  const int64_t FC = mlp_gated(act) ? 2 * int64_t(H) : H;
  fc_out_ = ctx.be.alloc(acts + ".fc", {N, FC}, at, MemCategory::Activations);
  act_ = ctx.be.alloc(acts + ".act", {N, H}, at, MemCategory::Activations);
  if (own_input && ctx.store.storage(size_t(fc_.weight)).act != ActCast::None)
    input_ = ctx.be.alloc(acts + ".in", {N, ctx.cfg.d_model}, at, MemCategory::Activations);
}

void DenseMlp::forward(const ModelContext& ctx, const Tensor& out, const Tensor& normed, int N) {
  const int C = ctx.cfg.d_model, H = H_, FC = mlp_gated(act_kind_) ? 2 * H : H;
  const Tensor& in = input_.empty() ? normed : input_;
  linear_forward(ctx, fc_, fc_out_, normed, in, N, C, FC);  // (N, FC)
  mlp_activation_forward(ctx.be, act_kind_, act_, fc_out_, N, H);  // (N, H)
  linear_forward(ctx, proj_, out, act_, act_, N, H, C);  // (N, C)
}

void DenseMlp::backward(const ModelContext& ctx, const BlockScratch& s, const Tensor& d_normed,
                        const Tensor& d_out, const Tensor& normed, int N) {
  const int C = ctx.cfg.d_model, H = H_, FC = mlp_gated(act_kind_) ? 2 * H : H;
  Backend& be = ctx.be;
  be.zero(s.d_act);
  linear_backward(ctx, proj_, s.d_act, d_out, act_, N, H, C);
  be.zero(s.d_fc);
  mlp_activation_backward(be, act_kind_, s.d_fc, s.d_act, fc_out_, N, H);
  be.zero(d_normed);
  linear_backward(ctx, fc_, d_normed, s.d_fc, input_.empty() ? normed : input_, N, C, FC);
}

}  // namespace eco
