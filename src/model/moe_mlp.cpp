// The MoE MLP's forward and backward over the Backend interface. Shapes: N tokens, C d_model,
// E experts, k per token, H expert hidden, FC its fc rows (H, or 2H for SwiGLU), R kept rows.
#include "model/moe_mlp.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace eco {

MoeMlp::MoeMlp(const ModelContext& ctx, const std::string& p, int layer, int64_t N) {
  const MoeConfig& m = ctx.cfg.moe;
  const int64_t E = m.n_experts, k = m.top_k, C = ctx.cfg.d_model;
  const std::string mp = p + "mlp.";
  router_ = ctx.index(mp + "router.weight");
  select_bias_ = ctx.index(mp + "router.select_bias");
  for (int e = 0; e < E; ++e) {
    const std::string ep = fmt::format("{}experts.{}.", mp, e);
    fc_.push_back({ctx.index(ep + "fc.weight"), ctx.index(ep + "fc.bias")});
    proj_.push_back({ctx.index(ep + "proj.weight"), ctx.index(ep + "proj.bias")});
  }
  if (m.n_shared_experts > 0)
    shared_ = std::make_unique<DenseMlp>(ctx, mp + "shared.", fmt::format("h.{}.shared", layer),
                                         int(m.shared_hidden()), m.expert_act, N, true);
  const DType dt = ctx.be.dtype(), at = ctx.be.act_dtype();
  auto act = [&](const char* what, std::vector<int64_t> shape, DType dtype) {
    return ctx.be.alloc(fmt::format("h.{}.moe.{}", layer, what), std::move(shape), dtype,
                        MemCategory::Activations);
  };
  logits_ = act("router_logits", {N, E}, dt);
  probs_ = act("router_probs", {N, E}, dt);
  lse_ = act("router_lse", {N}, dt);
  idx_ = act("expert_idx", {N, k}, DType::I32);
  gates_ = act("gates", {N, k}, dt);
  // Dropless keeps all N k slots; a capacity keeps fewer; the backend's segment alignment adds
  // at most align - 1 padding rows per expert.
  const int64_t R = moe_max_rows(N * k, E, ctx.be.moe_row_align());
  row_of_slot_ = act("row_of_slot", {N * k}, DType::I32);
  token_of_row_ = act("token_of_row", {R}, DType::I32);
  rows_x_ = act("rows_in", {R, C}, at);
  rows_fc_ = act("rows_fc", {R, m.expert_fc_rows()}, at);
  rows_act_ = act("rows_act", {R, m.expert_hidden}, at);
  rows_y_ = act("rows_out", {R, C}, at);
  step_routed_.assign(size_t(E), 0);
}

void MoeMlp::forward(const ModelContext& ctx, const Tensor& out, const Tensor& normed, int N) {
  const MoeConfig& m = ctx.cfg.moe;
  const int C = ctx.cfg.d_model, E = m.n_experts, k = m.top_k;
  Backend& be = ctx.be;
  // Router: fp32 logits from the unquantized router weight, on the input before any cast.
  be.router_matmul_forward(logits_, normed, ctx.w(router_), N, C, E);  // (N, E)
  be.moe_route(idx_, gates_, probs_, lse_, logits_, ctx.w(select_bias_), N, E, k, m.router,
               m.norm_topk);
  dispatch_ = be.moe_dispatch(row_of_slot_, token_of_row_, idx_, gates_, N, E, k, m.capacity(N));
  be.moe_gather(rows_x_, normed, token_of_row_, dispatch_.rows, C);  // (R, C)
  experts_forward(ctx);
  if (shared_) shared_->forward(ctx, out, normed, N);  // out = shared experts (N, C)
  be.moe_combine(out, rows_y_, gates_, row_of_slot_, N, C, k, /*accumulate=*/bool(shared_));

  // The figures of this forward: aux = c E sum_i f_i P_i with f_i = n_i / (N k) and
  // P_i = mean_t p_{t,i}; z = c_z mean_t lse_t^2.
  const MoeRouterSums sums = be.moe_router_sums(probs_, lse_, N, E);
  double fp = 0;
  for (int e = 0; e < E; ++e)
    fp += double(dispatch_.routed[size_t(e)]) / (double(N) * k) * sums.prob_sums[size_t(e)] / N;
  stats_.routed = dispatch_.routed;
  stats_.tokens = N;
  stats_.dropped = dispatch_.dropped;
  stats_.aux = m.aux_loss_coef * E * fp;
  stats_.z = m.z_loss_coef * sums.lse_sq_sum / N;
  stats_.entropy = sums.entropy_sum / N;
}

template <class Fn>
void MoeMlp::for_each_segment(Fn fn) const {
  // A segment runs to the next one's start: its padding rows (zero inputs) go through the
  // GEMMs too, which then see whole tiles.
  const size_t E = dispatch_.offsets.size();
  for (size_t e = 0; e < E; ++e) {
    const int64_t r0 = dispatch_.offsets[e];
    const int64_t n = (e + 1 < E ? dispatch_.offsets[e + 1] : dispatch_.rows) - r0;
    if (n > 0) fn(e, r0, int(n));
  }
}

void MoeMlp::experts_forward(const ModelContext& ctx) {
  const MoeConfig& m = ctx.cfg.moe;
  const int C = ctx.cfg.d_model, H = m.expert_hidden, FC = int(m.expert_fc_rows());
  for_each_segment([&](size_t e, int64_t r0, int n) {
    const Tensor x = rows_x_.slice(r0 * C, {n, C}), h = rows_fc_.slice(r0 * FC, {n, FC}),
                 a = rows_act_.slice(r0 * H, {n, H}), y = rows_y_.slice(r0 * C, {n, C});
    linear_forward(ctx, fc_[e], h, x, x, n, C, FC);  // the rows are a copy: cast in place
    if (m.expert_act == MlpKind::Swiglu)
      ctx.be.swiglu_forward(a, h, n, H);
    else
      ctx.be.gelu_forward(a, h, int64_t(n) * H);
    linear_forward(ctx, proj_[e], y, a, a, n, H, C);
  });
}

void MoeMlp::backward(const ModelContext& ctx, const BlockScratch& s, const Tensor& d_normed,
                      const Tensor& d_out, const Tensor& normed, int N) {
  const MoeConfig& m = ctx.cfg.moe;
  const int C = ctx.cfg.d_model, E = m.n_experts, k = m.top_k;
  Backend& be = ctx.be;
  if (shared_)
    shared_->backward(ctx, s, d_normed, d_out, normed, N);  // writes d_normed
  else
    be.zero(d_normed);
  // Padding rows get a zero gradient (so they add nothing to the weights' gradients).
  if (dispatch_.rows > dispatch_.kept) be.zero(s.moe_d_rows);
  be.moe_combine_backward(s.moe_d_rows, s.moe_d_gates, d_out, rows_y_, gates_, row_of_slot_, N,
                          C, k);
  experts_backward(ctx, s);
  be.moe_scatter_add(d_normed, s.moe_d_rows, row_of_slot_, N, C, k);

  // Router: the gates' gradient plus the aux loss (dAux/dp_{t,i} = c E n_i / (k N^2)) and the
  // z-loss (2 c_z / N lse_t p_t), all times the loss scale.
  const double scale = ctx.loss_scale;
  std::vector<double> aux_w;
  if (m.aux_loss_coef > 0)
    for (int e = 0; e < E; ++e)
      aux_w.push_back(scale * m.aux_loss_coef * E * double(dispatch_.routed[size_t(e)]) /
                      (double(k) * N * N));
  const double z_coef = scale * 2.0 * m.z_loss_coef / N;
  be.zero(s.moe_d_logits);
  be.moe_router_backward(s.moe_d_logits, s.moe_d_gates, idx_, gates_, probs_, logits_, lse_,
                         aux_w, z_coef, N, E, k, m.router, m.norm_topk);
  be.router_matmul_backward(d_normed, ctx.g(router_), s.moe_d_logits, normed, ctx.w(router_), N,
                            C, E);
  for (int e = 0; e < E; ++e) step_routed_[size_t(e)] += dispatch_.routed[size_t(e)];
}

void MoeMlp::experts_backward(const ModelContext& ctx, const BlockScratch& s) {
  const MoeConfig& m = ctx.cfg.moe;
  const int C = ctx.cfg.d_model, H = m.expert_hidden, FC = int(m.expert_fc_rows());
  const int64_t R = dispatch_.rows;
  Backend& be = ctx.be;
  // proj backward of every expert (d_rows holds dL/d y), then the activation over all rows,
  // then fc backward into d_rows again (now dL/d x; its dL/d y is spent).
  be.zero(s.moe_d_act);
  for_each_segment([&](size_t e, int64_t r0, int n) {
    linear_backward(ctx, proj_[e], s.moe_d_act.slice(r0 * H, {n, H}),
                    s.moe_d_rows.slice(r0 * C, {n, C}), rows_act_.slice(r0 * H, {n, H}), n, H, C);
  });
  be.zero(s.moe_d_fc);
  if (m.expert_act == MlpKind::Swiglu)
    be.swiglu_backward(s.moe_d_fc, s.moe_d_act, rows_fc_, int(R), H);
  else
    be.gelu_backward(s.moe_d_fc, rows_fc_, s.moe_d_act, R * H);
  be.zero(s.moe_d_rows);
  for_each_segment([&](size_t e, int64_t r0, int n) {
    linear_backward(ctx, fc_[e], s.moe_d_rows.slice(r0 * C, {n, C}),
                    s.moe_d_fc.slice(r0 * FC, {n, FC}), rows_x_.slice(r0 * C, {n, C}), n, C, FC);
  });
}

void MoeMlp::after_optimizer_step(const ModelContext& ctx) {
  const MoeConfig& m = ctx.cfg.moe;
  const int E = m.n_experts;
  if (m.router == MoeRouter::SigmoidBias && m.bias_update_rate > 0) {
    double mean = 0;
    for (int64_t n : step_routed_) mean += double(n) / E;
    std::vector<double> b(static_cast<size_t>(E));
    const DType dt = ctx.be.dtype();
    std::vector<float> bf(dt == DType::F32 ? size_t(E) : 0);
    if (dt == DType::F32) {
      ctx.store.get(size_t(select_bias_), bf.data());
      std::copy(bf.begin(), bf.end(), b.begin());
    } else {
      ctx.store.get(size_t(select_bias_), b.data());
    }
    double centre = 0;
    for (int e = 0; e < E; ++e) {
      const double n = double(step_routed_[size_t(e)]);
      b[size_t(e)] += m.bias_update_rate * double((mean > n) - (mean < n));
      centre += b[size_t(e)] / E;
    }
    for (double& v : b) v -= centre;
    if (dt == DType::F32) {
      std::copy(b.begin(), b.end(), bf.begin());
      ctx.store.set(size_t(select_bias_), bf.data());
    } else {
      ctx.store.set(size_t(select_bias_), b.data());
    }
  }
  std::fill(step_routed_.begin(), step_routed_.end(), 0);
}

}  // namespace eco
