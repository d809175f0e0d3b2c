// The MoE MLP's forward and backward over the Backend interface. Shapes: N tokens, C d_model,
// E experts, k per token, H expert hidden, FC its fc rows (H, or 2H for SwiGLU), R kept rows.
#include "model/moe_mlp.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

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
  rows_y_ = act("rows_out", {R, C}, at);
  step_routed_.assign(size_t(E), 0);
  layer_ = layer;
  ep_ = ctx.ep && ctx.ep->enabled();
  if (!ep_) {
    rows_fc_ = act("rows_fc", {R, m.expert_fc_rows()}, at);
    rows_act_ = act("rows_act", {R, m.expert_hidden}, at);
    ex_x_ = rows_x_, ex_fc_ = rows_fc_, ex_act_ = rows_act_, ex_y_ = rows_y_;
    return;
  }
  // Expert parallelism: this rank's experts see at most every source's R rows.
  const ExpertParallel& P = *ctx.ep;
  local_ = int(E / P.ep);
  first_ = P.rank * local_;
  const int64_t RR = P.expert_rows(R);
  ex_x_ = act("ep_rows_in", {RR, C}, at);
  ex_fc_ = act("ep_rows_fc", {RR, m.expert_fc_rows()}, at);
  ex_act_ = act("ep_rows_act", {RR, m.expert_hidden}, at);
  ex_y_ = act("ep_rows_out", {RR, C}, at);
  auto ws = [&](const char* what, std::vector<int64_t> shape, DType dtype, MemCategory cat) {
    return ctx.be.alloc(fmt::format("h.{}.moe.{}", layer, what), std::move(shape), dtype, cat);
  };
  // An expert's parameters are consecutive in the table (fc.weight, fc.bias, proj.weight,
  // proj.bias): one span of the flat gradient.
  const auto& specs = ctx.store.table().specs;
  for (int k = 0; k < local_; ++k) {
    const int x = first_ + k;
    const LinearRef last = proj_[size_t(x)];
    const size_t end = size_t(last.bias >= 0 ? last.bias : last.weight);
    const int64_t base = ctx.store.grad_offset(size_t(fc_[size_t(x)].weight));
    expert_base_.push_back(base);
    expert_grad_elems_ = ctx.store.grad_offset(end) + specs[end].numel() - base;
  }
  source_slots_ = P.keep_sources ? P.ep : 1;
  source_grads_ = ws(P.keep_sources ? "ep_source_grads" : "ep_expert_grads",
                     {source_slots_ * local_ * expert_grad_elems_}, dt, MemCategory::Grads);  // 0s
  if (!ctx.exchange) return;  // a plan's model
  ExpertGradients folded{source_grads_, source_slots_, local_, expert_grad_elems_, {}};
  for (int64_t base : expert_base_)
    folded.grads.push_back(ctx.grads.slice(base, {expert_grad_elems_}));
  ctx.exchange->add_expert_gradients(std::move(folded));
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
  plan_segments(ctx);
  if (ep_) ctx.exchange->exchange_rows(rows_x_, send_rows_, ex_x_, recv_rows_, C);  // to the owners
  experts_forward(ctx);
  if (ep_) ctx.exchange->exchange_rows(ex_y_, recv_rows_, rows_y_, send_rows_, C);  // and back
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

void MoeMlp::plan_segments(const ModelContext& ctx) {
  const size_t E = dispatch_.offsets.size();
  std::vector<int64_t> seg(E);  // expert e's segment of the permuted rows, padding included
  for (size_t e = 0; e < E; ++e)
    seg[e] = (e + 1 < E ? dispatch_.offsets[e + 1] : dispatch_.rows) - dispatch_.offsets[e];
  segments_.clear();
  if (!ep_) {
    for (size_t e = 0; e < E; ++e)
      if (seg[e] > 0) segments_.push_back({int(e), dispatch_.offsets[e], int(seg[e]), 0});
    ex_rows_ = dispatch_.rows;
    return;
  }
  // Rank d of the group owns experts [d L, (d + 1) L): its rows are one run of the permuted
  // rows, and the runs lie in rank order, so rows_x_ is the send buffer as it is. Each source's
  // rows of each local expert keep their segment (the GEMM the source would run at ep 1).
  const ExpertParallel& P = *ctx.ep;
  seg_rows_.resize(size_t(P.ep) * E);
  ctx.exchange->gather_counts(seg_rows_.data(), seg.data(), int64_t(E));
  send_rows_.assign(size_t(P.ep), 0);
  recv_rows_.assign(size_t(P.ep), 0);
  for (size_t e = 0; e < E; ++e) send_rows_[size_t(P.owner(int(e), int(E)))] += seg[e];
  int64_t r = 0;
  for (int s = 0; s < P.ep; ++s)
    for (int k = 0; k < local_; ++k) {
      const int64_t n = seg_rows_[size_t(s) * E + size_t(first_ + k)];
      if (n > 0) segments_.push_back({first_ + k, r, int(n), s});
      r += n;
      recv_rows_[size_t(s)] += n;
    }
  ex_rows_ = r;
  if (r > ex_x_.shape[0]) grow_expert_rows(ctx, r);
}

void MoeMlp::grow_expert_rows(const ModelContext& ctx, int64_t rows) {
  const ExpertParallel& P = *ctx.ep;
  const MoeConfig& m = ctx.cfg.moe;
  const int64_t C = ctx.cfg.d_model, old = ex_x_.shape[0];
  const int64_t one = rows_x_.shape[0];  // one source's rows at most: the balanced load
  const int64_t most = int64_t(P.ep) * one;
  ECO_ASSERT(rows <= most, "layer {}: {} expert rows from {} sources of {}", layer_, rows, P.ep,
             one);
  const int64_t n = std::min(most, (std::max(rows, old + old / 4) + 15) / 16 * 16);
  const DType at = ctx.be.act_dtype(), dt = ctx.be.dtype();
  auto grown = [&](const char* what, int64_t width, DType dtype, MemCategory cat) {
    return ctx.be.alloc(fmt::format("h.{}.moe.{} (grown)", layer_, what), {n, width}, dtype, cat);
  };
  ex_x_ = grown("ep_rows_in", C, at, MemCategory::Activations);
  ex_fc_ = grown("ep_rows_fc", m.expert_fc_rows(), at, MemCategory::Activations);
  ex_act_ = grown("ep_rows_act", m.expert_hidden, at, MemCategory::Activations);
  ex_y_ = grown("ep_rows_out", C, at, MemCategory::Activations);
  grown_d_fc_ = grown("d_fc", m.expert_fc_rows(), dt, MemCategory::Workspace);
  grown_d_act_ = grown("d_act", m.expert_hidden, dt, MemCategory::Workspace);
  grown_d_rows_ = grown("ep_d_rows", C, dt, MemCategory::Workspace);
  const int64_t bytes = n * (2 * C + m.expert_fc_rows() + m.expert_hidden) *
                            int64_t(dtype_size(at)) +
                        n * (C + m.expert_fc_rows() + m.expert_hidden) * int64_t(dtype_size(dt));
  note_ = fmt::format(
      "layer {} routed {} rows to the experts of rank {} of its expert-parallel group, more than "
      "the {} its buffers held ({} rows a source, parallel.ep_row_factor {}): grew them to {} rows "
      "({:.1f} MiB more); a factor of {:.2f} would have held them from the start",
      layer_, rows, P.rank, old, one, P.row_factor > 0 ? P.row_factor : double(P.ep), n,
      double(bytes) / 1048576.0, std::ceil(100.0 * double(rows) / double(one)) / 100.0);
}

void MoeMlp::experts_forward(const ModelContext& ctx) {
  const MoeConfig& m = ctx.cfg.moe;
  const int C = ctx.cfg.d_model, H = m.expert_hidden, FC = int(m.expert_fc_rows());
  for (const Segment& g : segments_) {
    const int64_t r0 = g.r0;
    const int n = g.n;
    const size_t e = size_t(g.expert);
    const Tensor x = ex_x_.slice(r0 * C, {n, C}), h = ex_fc_.slice(r0 * FC, {n, FC}),
                 a = ex_act_.slice(r0 * H, {n, H}), y = ex_y_.slice(r0 * C, {n, C});
    linear_forward(ctx, fc_[e], h, x, x, n, C, FC);  // the rows are a copy: cast in place
    mlp_activation_forward(ctx.be, m.expert_act, a, h, n, H);
    linear_forward(ctx, proj_[e], y, a, a, n, H, C);
  }
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
  if (!ep_) {
    experts_backward(ctx, s.moe_d_rows, s.moe_d_act, s.moe_d_fc);
  } else {  // dL/dy to the experts' owners, dL/dx back
    // (After a growth this layer's own buffers: the shared ones hold the configured rows.)
    const bool grown = !grown_d_rows_.empty();
    const Tensor& d_rows = grown ? grown_d_rows_ : s.moe_ep_d_rows;
    ctx.exchange->exchange_rows(s.moe_d_rows, send_rows_, d_rows, recv_rows_, C);
    experts_backward(ctx, d_rows, grown ? grown_d_act_ : s.moe_d_act,
                     grown ? grown_d_fc_ : s.moe_d_fc);
    ctx.exchange->exchange_rows(d_rows, recv_rows_, s.moe_d_rows, send_rows_, C);
  }
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

template <class Run>
void MoeMlp::segment_grads(const ModelContext& ctx, LinearRef l, const Segment& g, Run run) {
  if (!ep_) {
    run();
    return;
  }
  // The GEMM writes into a zeroed slot (never accumulates into a nonzero gradient: the blocked
  // GEMM would round differently), which is then added to the source's accumulator: the sum
  // over micro-batches that rank `source` would hold at ep 1.
  const auto& specs = ctx.store.table().specs;
  const int k = g.expert - first_;
  for (int i : {l.weight, l.bias}) {
    if (i < 0) continue;
    ctx.be.zero(ctx.g(i));
  }
  run();
  for (int i : {l.weight, l.bias}) {
    if (i < 0) continue;
    const ParamSpec& sp = specs[size_t(i)];
    const int64_t source = source_slots_ > 1 ? g.source : 0;  // one running sum: sources in order
    const int64_t at = (source * local_ + k) * expert_grad_elems_ +
                       ctx.store.grad_offset(size_t(i)) - expert_base_[size_t(k)];
    ctx.be.add_inplace(source_grads_.slice(at, {sp.numel()}), ctx.g(i), sp.numel());
  }
}

void MoeMlp::experts_backward(const ModelContext& ctx, const Tensor& d_rows, const Tensor& d_act,
                              const Tensor& d_fc) {
  const MoeConfig& m = ctx.cfg.moe;
  const int C = ctx.cfg.d_model, H = m.expert_hidden, FC = int(m.expert_fc_rows());
  const int64_t R = ex_rows_;
  Backend& be = ctx.be;
  // proj backward of every expert (d_rows holds dL/d y), then the activation over all rows,
  // then fc backward into d_rows again (now dL/d x; its dL/d y is spent).
  be.zero(d_act);
  for (const Segment& g : segments_) {
    const int64_t r0 = g.r0;
    const int n = g.n;
    const LinearRef l = proj_[size_t(g.expert)];
    segment_grads(ctx, l, g, [&] {
      linear_backward(ctx, l, d_act.slice(r0 * H, {n, H}), d_rows.slice(r0 * C, {n, C}),
                      ex_act_.slice(r0 * H, {n, H}), n, H, C);
    });
  }
  be.zero(d_fc);
  if (R > 0) {
    mlp_activation_backward(be, m.expert_act, d_fc, d_act, ex_fc_, int(R), H);
  }
  be.zero(d_rows);
  for (const Segment& g : segments_) {
    const int64_t r0 = g.r0;
    const int n = g.n;
    const LinearRef l = fc_[size_t(g.expert)];
    segment_grads(ctx, l, g, [&] {
      linear_backward(ctx, l, d_rows.slice(r0 * C, {n, C}), d_fc.slice(r0 * FC, {n, FC}),
                      ex_x_.slice(r0 * C, {n, C}), n, C, FC);
    });
  }
  // The local experts' gradient slots stay zero until the fold (ExpertGradients) fills them.
  if (ep_)
    for (int k = 0; k < local_; ++k)
      be.zero(ctx.grads.slice(expert_base_[size_t(k)], {expert_grad_elems_}));
}

void MoeMlp::after_optimizer_step(const ModelContext& ctx) {
  const MoeConfig& m = ctx.cfg.moe;
  const int E = m.n_experts;
  if (m.router == MoeRouter::SigmoidBias && m.bias_update_rate > 0) {
    double mean = 0;
    for (int64_t n : step_routed_) mean += double(n) / E;
    std::vector<double> b(static_cast<size_t>(E));
    const DType dt = ctx.be.dtype();
    std::vector<float> bias_f32(dt == DType::F32 ? size_t(E) : 0);  // the stored dtype's copy
    if (dt == DType::F32) {
      ctx.store.get(size_t(select_bias_), bias_f32.data());
      std::copy(bias_f32.begin(), bias_f32.end(), b.begin());
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
      std::copy(b.begin(), b.end(), bias_f32.begin());
      ctx.store.set(size_t(select_bias_), bias_f32.data());
    } else {
      ctx.store.set(size_t(select_bias_), b.data());
    }
  }
  std::fill(step_routed_.begin(), step_routed_.end(), 0);
}

}  // namespace eco
