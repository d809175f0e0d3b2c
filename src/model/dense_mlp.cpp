// The dense MLP's forward and backward over the Backend interface (H mlp hidden, FC fc rows).
#include "model/dense_mlp.h"

namespace eco {

std::unique_ptr<Mlp> make_mlp(const ModelContext& ctx, const std::string& prefix, int layer,
                              int64_t N) {
  return std::make_unique<DenseMlp>(ctx, prefix, layer, N);
}

DenseMlp::DenseMlp(const ModelContext& ctx, const std::string& p, int layer, int64_t N) {
  fc_ = {ctx.index(p + "mlp.fc.weight"), ctx.index(p + "mlp.fc.bias")};
  proj_ = {ctx.index(p + "mlp.proj.weight"), ctx.index(p + "mlp.proj.bias")};
  const DType at = ctx.be.act_dtype();
  fc_out_ = ctx.be.alloc(fmt::format("h.{}.fc", layer), {N, ctx.cfg.fc_rows()}, at,
                         MemCategory::Activations);
  act_ = ctx.be.alloc(fmt::format("h.{}.act", layer), {N, ctx.cfg.mlp_hidden}, at,
                      MemCategory::Activations);
}

void DenseMlp::forward(const ModelContext& ctx, const Tensor& out, const Tensor& normed, int N) {
  const int C = ctx.cfg.d_model, H = ctx.cfg.mlp_hidden, FC = int(ctx.cfg.fc_rows());
  linear_forward(ctx, fc_, fc_out_, normed, normed, N, C, FC);  // (N, FC)
  if (ctx.cfg.mlp == MlpKind::Swiglu)
    ctx.be.swiglu_forward(act_, fc_out_, N, H);  // (N, H)
  else
    ctx.be.gelu_forward(act_, fc_out_, int64_t(N) * H);
  linear_forward(ctx, proj_, out, act_, act_, N, H, C);  // (N, C)
}

void DenseMlp::backward(const ModelContext& ctx, const BlockScratch& s, const Tensor& d_normed,
                        const Tensor& d_out, const Tensor& normed, int N) {
  const int C = ctx.cfg.d_model, H = ctx.cfg.mlp_hidden, FC = int(ctx.cfg.fc_rows());
  Backend& be = ctx.be;
  be.zero(s.d_act);
  linear_backward(ctx, proj_, s.d_act, d_out, act_, N, H, C);
  be.zero(s.d_fc);
  if (ctx.cfg.mlp == MlpKind::Swiglu)
    be.swiglu_backward(s.d_fc, s.d_act, fc_out_, N, H);
  else
    be.gelu_backward(s.d_fc, fc_out_, s.d_act, int64_t(N) * H);
  be.zero(d_normed);
  linear_backward(ctx, fc_, d_normed, s.d_fc, normed, N, C, FC);
}

}  // namespace eco
