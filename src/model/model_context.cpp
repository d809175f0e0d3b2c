// Parameter lookups and the family's norms over the Backend interface.
#include "model/model_context.h"

#include "base/error.h"

namespace eco {

int ModelContext::index(const std::string& name) const { return store.table().index_of(name); }

Tensor ModelContext::g(int i) const {
  if (i < 0) return Tensor{};
  const ParamSpec& s = store.table().specs[size_t(i)];
  ECO_ASSERT(store.present(size_t(i)), "the gradient of '{}', another rank's expert", s.name);
  return grads.slice(store.grad_offset(size_t(i)), s.shape);
}

Tensor norm_gain(const ModelContext& ctx, int i, int64_t n, int slot) {
  if (!ctx.cfg.norm_unit_offset) return ctx.w(i);
  const Tensor gain = (slot == 0 ? ctx.gain_scratch0 : ctx.gain_scratch1).slice(0, {n});
  ctx.be.residual_forward(gain, ctx.w(i), ctx.ones.slice(0, {n}), n);  // 1 + w
  return gain;
}

void norm_forward(const ModelContext& ctx, const NormActs& a, const Tensor& inp, NormRef p,
                  int N) {
  const ModelConfig& m = ctx.cfg;
  if (m.norm == NormKind::RmsNorm)
    ctx.be.rmsnorm_forward(a.out, a.rstd, inp, norm_gain(ctx, p.weight, m.d_model), N, m.d_model,
                           m.norm_eps);
  else
    ctx.be.layernorm_forward(a.out, a.mean, a.rstd, inp, ctx.w(p.weight), ctx.w(p.bias), N,
                             m.d_model, m.norm_eps);
}

void residual_norm_forward(const ModelContext& ctx, const Tensor& resid, const NormActs& a,
                           const Tensor& x, const Tensor& y, NormRef p, int N) {
  const bool rms = ctx.cfg.norm == NormKind::RmsNorm;
  ctx.be.residual_norm_forward(resid, a.out, rms ? Tensor{} : a.mean, a.rstd, x, y,
                               norm_gain(ctx, p.weight, ctx.cfg.d_model),
                               rms ? Tensor{} : ctx.w(p.bias), N,
                               ctx.cfg.d_model, ctx.cfg.norm_eps, rms);
}

void norm_backward(const ModelContext& ctx, const Tensor& dinp, const Tensor& dout,
                   const Tensor& inp, NormRef p, const NormActs& a, int N) {
  const int C = ctx.cfg.d_model;
  if (ctx.cfg.norm == NormKind::RmsNorm)
    ctx.be.rmsnorm_backward(dinp, ctx.g(p.weight), dout, inp, norm_gain(ctx, p.weight, C), a.rstd,
                            N, C);
  else
    ctx.be.layernorm_backward(dinp, ctx.g(p.weight), ctx.g(p.bias), dout, inp, ctx.w(p.weight),
                              a.mean, a.rstd, N, C);
}

}  // namespace eco
