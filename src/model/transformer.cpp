// The model around the blocks: embedding, the loop over blocks, final norm, head and loss.
// Shapes: B batch, T time, C d_model, NH heads, H mlp hidden, V vocab, N = B*T.
#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "core/rng.h"

namespace eco {

namespace {
// The routed experts another rank of the expert-parallel group owns (none at ep 1).
std::vector<char> absent_experts(const ParamTable& table, const ModelConfig& cfg,
                                 const ExpertParallel& ep) {
  if (!ep.enabled()) return {};
  std::vector<char> absent(table.specs.size(), 0);
  for (size_t i = 0; i < table.specs.size(); ++i) {
    const int x = routed_expert_of(table.specs[i].name);
    absent[i] = x >= 0 && !ep.owns(x, cfg.moe.n_experts);
  }
  return absent;
}
}  // namespace

Transformer::Transformer(const ModelConfig& cfg, Backend& be, int max_batch,
                         const Treatment& treatment, QuantizeScope scope,
                         const ExpertParallel& ep, ExpertExchange* exchange)
    : cfg_(cfg), be_(be), ep_(ep), table_(build_param_table(cfg)),
      store_(table_, treatment, be, scope, absent_experts(table_, cfg, ep)),
      max_batch_(max_batch), ctx_{cfg_, be_, store_, grads_} {
  ctx_.ep = &ep_;
  ctx_.exchange = exchange;
  // Parameters, gradients, saved statistics and losses in dtype(); activations, their gradients
  // and logits in act_dtype() (bf16 on CUDA).
  const DType dt = be_.dtype(), at = be_.act_dtype();
  const int64_t B = max_batch, T = cfg.seq_len, N = B * T, C = cfg.d_model, NH = cfg.n_head;
  const int64_t H = cfg.mlp_hidden, FC = cfg.fc_rows(), V = cfg.vocab_size;
  grads_ = be_.alloc("grads", {store_.grad_total()}, dt, MemCategory::Grads);
  wte_ = ctx_.index("wte");
  wpe_ = ctx_.index("wpe");
  norm_f_ = {ctx_.index("norm_f.weight"), ctx_.index("norm_f.bias")};
  head_ = cfg.tie_embeddings ? wte_ : ctx_.index("lm_head.weight");
  // The gradient bounds a block's backward completes: 0, then block l's first offset in the
  // flat gradient (the least over its parameters present on this rank; an absent expert has
  // none: expert parallelism), then the final norm's, then the end.
  ECO_ASSERT(table_.blocks.size() == size_t(cfg.n_layer),
             "the parameter table has {} blocks, the model {}", table_.blocks.size(),
             cfg.n_layer);
  grad_ready_bounds_.push_back(0);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const BlockParams& block = table_.blocks[size_t(l)];
    int64_t begin = -1;
    for (size_t i = block.first; i < block.end; ++i)
      if (store_.present(i) && (begin < 0 || store_.grad_offset(i) < begin))
        begin = store_.grad_offset(i);
    ECO_ASSERT(begin >= 0, "block {} has no parameters", l);
    grad_ready_bounds_.push_back(begin);
  }
  grad_ready_bounds_.push_back(store_.grad_offset(size_t(ctx_.index("norm_f.weight"))));
  grad_ready_bounds_.push_back(store_.grad_total());
  ECO_ASSERT(std::is_sorted(grad_ready_bounds_.begin(), grad_ready_bounds_.end()),
             "the parameter table is not embeddings, blocks in order, final norm, head");
  tokens_ = be_.alloc("tokens", {N}, DType::I32, MemCategory::Workspace);
  targets_ = be_.alloc("targets", {N}, DType::I32, MemCategory::Workspace);
  losses_ = be_.alloc("losses", {N}, dt, MemCategory::Workspace);
  encoded_ = be_.alloc("encoded", {N, C}, at, MemCategory::Activations);
  for (int l = 0; l < cfg.n_layer; ++l)
    blocks_.push_back(std::make_unique<Block>(ctx_, l, int(B), int(T)));
  norm_f_acts_.out = be_.alloc("norm_f", {N, C}, at, MemCategory::Activations);
  norm_f_acts_.mean = be_.alloc("norm_f_mean", {N}, dt, MemCategory::Activations);
  norm_f_acts_.rstd = be_.alloc("norm_f_rstd", {N}, dt, MemCategory::Activations);
  logits_ld_ = be_.logits_stride(int(V), int(C));
  logits_ = be_.alloc("logits", {N, logits_ld_}, at, MemCategory::Workspace);
  auto ws = [&](const char* what, std::vector<int64_t> shape) {
    return be_.alloc(what, std::move(shape), at, MemCategory::Workspace);
  };
  BlockScratch& s = scratch_;
  s.d_resid = ws("d_resid", {N, C});
  s.d_norm = ws("d_norm", {N, C});
  const int64_t QKV = cfg.qkv_rows(), A = cfg.attn_width(), hd = cfg.head_dim();
  s.d_qkv = ws("d_qkv", {N, QKV});
  if (cfg.positions == PositionKind::Rope) s.d_qkv_rope = ws("d_qkv_rope", {N, QKV});
  if (cfg.qk_norm) s.d_qkv_normed = ws("d_qkv_normed", {N, QKV});
  if (cfg.post_norms) s.d_post = ws("d_post", {N, C});
  s.d_atty = ws("d_atty", {N, A});
  if (cfg.norm_unit_offset) {  // the (1 + w) gains (ModelContext::gain_scratch0, 1)
    const int64_t G = std::max(C, hd);
    ctx_.ones = be_.alloc("norm_gain_ones", {G}, dt, MemCategory::Workspace);  // filled by forward
    ctx_.gain_scratch0 = be_.alloc("norm_gain0", {G}, dt, MemCategory::Workspace);
    ctx_.gain_scratch1 = be_.alloc("norm_gain1", {G}, dt, MemCategory::Workspace);
  }
  // The dense MLPs' and the MoE shared experts' (model/dense_mlp.h) backward temporaries.
  const MoeConfig& moe = cfg.moe;
  const int64_t shared_fc = moe.expert_fc_rows() * moe.n_shared_experts;
  s.d_fc = ws("d_fc", {N, std::max(FC, shared_fc)});
  s.d_act = ws("d_act", {N, std::max(H, moe.shared_hidden())});
  if (moe.enabled()) {
    const int64_t rows = moe_max_rows(N * moe.top_k, moe.n_experts, be_.moe_row_align());
    // Expert parallelism: an owner's experts see at most every source's rows (ep x rows).
    const int64_t expert_rows = ep_.enabled() ? ep_.expert_rows(rows) : rows;
    s.moe_d_rows = ws("moe_d_rows", {rows, C});
    s.moe_d_fc = ws("moe_d_fc", {expert_rows, moe.expert_fc_rows()});
    s.moe_d_act = ws("moe_d_act", {expert_rows, moe.expert_hidden});
    if (ep_.enabled()) s.moe_ep_d_rows = ws("moe_ep_d_rows", {expert_rows, C});
    s.moe_d_logits = be_.alloc("moe_d_logits", {N, moe.n_experts}, dt, MemCategory::Workspace);
    s.moe_d_gates = be_.alloc("moe_d_gates", {N, moe.top_k}, dt, MemCategory::Workspace);
  }
  s.d_att = be_.alloc("d_att_scratch", be_.attention_state_shape(int(B), int(NH), int(T)), dt,
                      MemCategory::Workspace);
  s.out_c = ws("scratch_c", {N, C});

  for (int l = 0; l < cfg.n_layer; ++l) {
    forward_range_.push_back(fmt::format("layer {} forward", l));
    backward_range_.push_back(fmt::format("layer {} backward", l));
  }

  // The backend's own workspaces for these shapes (CUDA: attention scores, padded logits, ...).
  WorkspaceShapes& shapes = shapes_;
  shapes.tokens = N;
  shapes.seq_len = int(T);
  shapes.d_model = int(C);
  shapes.n_head = int(NH);
  shapes.head_dim = int(hd);
  shapes.plain_attention = false;
  for (int l = 0; l < cfg.n_layer; ++l)
    shapes.plain_attention |= blocks_[size_t(l)]->attention().shape().plain();
  shapes.vocab = int(V);
  shapes.widest_linear_in = std::max({C, H, A});
  shapes.widest_linear_out = std::max(QKV, FC);
  shapes.largest_weight = std::max({V * C, QKV * C, FC * C, C * H, C * A});
  if (moe.enabled()) {
    const int64_t eh = std::max<int64_t>(moe.expert_hidden, moe.shared_hidden());
    const int64_t efc = std::max(moe.expert_fc_rows(), shared_fc);
    shapes.widest_linear_in = std::max(shapes.widest_linear_in, eh);
    shapes.widest_linear_out = std::max({shapes.widest_linear_out, efc, int64_t(moe.n_experts)});
    shapes.largest_weight = std::max({shapes.largest_weight, efc * C, C * eh});
  }
  // FP8 activation codes when any linear casts its input to E4M3 (ParamStorage::act).
  for (size_t i = 0; i < store_.size(); ++i)
    shapes.fp8_activations |= store_.storage(i).act == ActCast::E4M3Row;
  be_.reserve_workspaces(shapes);
}

float Transformer::embedding_scale() const {
  // Gemma: sqrt(d_model) in the embedding's dtype (HF casts the normalizer to it), applied
  // after the lookup.
  return float(std::sqrt(double(cfg_.d_model)));
}

Tensor Transformer::grad(size_t i) const {
  if (!store_.present(i)) return Tensor{nullptr, {0}, grads_.dtype};
  return grads_.slice(store_.grad_offset(i), table_.specs[i].shape);
}

void Transformer::zero_grad() { be_.zero(grads_); }

void Transformer::upload_tokens(const Tensor& dst, const int32_t* src, int B, int T) {
  ECO_ASSERT(B >= 1 && B <= max_batch_ && T >= 1 && T <= cfg_.seq_len,
             "batch ({}, {}) exceeds the allocated ({}, {})", B, T, max_batch_, cfg_.seq_len);
  be_.copy_from_host(dst.slice(0, {int64_t(B) * T}), src);
}

void Transformer::forward(int B, int T) {
  const int N = B * T, C = cfg_.d_model;
  if (cfg_.norm_unit_offset && !ones_filled_) {  // here, not in the constructor: --plan's backend
    const size_t G = size_t(ctx_.ones.numel());  // allocates no memory and runs nothing
    if (ctx_.ones.dtype == DType::F64) {
      be_.copy_from_host(ctx_.ones, std::vector<double>(G, 1.0).data());
    } else {
      ECO_ASSERT(ctx_.ones.dtype == DType::F32, "norm gains of dtype {}",
                 dtype_name(ctx_.ones.dtype));
      be_.copy_from_host(ctx_.ones, std::vector<float>(G, 1.0f).data());
    }
    ones_filled_ = true;
  }
  be_.embedding_forward(encoded_, tokens_, ctx_.w(wte_), ctx_.w(wpe_), B, T, C);  // (N, C)
  if (cfg_.scale_embeddings) be_.scale_inplace(encoded_, embedding_scale(), int64_t(N) * C);
  Tensor x = encoded_;
  // Every residual add is fused with the norm that reads it (Backend::residual_norm_forward):
  // norm2 inside the block, then norm1 of the next block or the final norm.
  const AttentionBlock& first = blocks_[0]->attention();
  norm_forward(ctx_, first.normed(), x, first.norm(), N);
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const ScopedRange range(be_, forward_range_[l].c_str());
    const bool last = l + 1 == cfg_.n_layer;
    const NormActs& next = last ? norm_f_acts_ : blocks_[l + 1]->attention().normed();
    const NormRef next_norm = last ? norm_f_ : blocks_[l + 1]->attention().norm();
    blocks_[l]->forward(ctx_, scratch_, x, next, next_norm, B, T);
    x = blocks_[l]->output();
  }
  const ScopedRange range(be_, "head forward");
  be_.head_forward(logits_, norm_f_acts_.out, ctx_.w(head_), N, C, cfg_.vocab_size,
                   logits_ld_);  // (N, ld)
}

double Transformer::loss(int B, int T, float dloss_per_row, bool with_grad) {
  const int N = B * T;
  be_.crossentropy_forward_backward(losses_, with_grad ? logits_ : Tensor{}, logits_, targets_, N,
                                    cfg_.vocab_size, logits_ld_, dloss_per_row);
  double sum = 0;
  const Tensor l = losses_.slice(0, {N});
  if (l.dtype == DType::F64) {
    std::vector<double> h(N);
    be_.copy_to_host(h.data(), l);
    for (double v : h) sum += v;
  } else {
    std::vector<float> h(N);
    be_.copy_to_host(h.data(), l);
    for (float v : h) sum += v;
  }
  return sum / N;
}

void Transformer::backward(int B, int T) {
  const int N = B * T, C = cfg_.d_model;
  const BlockScratch& s = scratch_;
  const Tensor x_last = blocks_.back()->output();
  {
    const ScopedRange range(be_, "head + final norm backward");
    be_.zero(s.d_norm);
    be_.head_backward(s.d_norm, ctx_.g(head_), logits_, norm_f_acts_.out, ctx_.w(head_), N, C,
                      cfg_.vocab_size, logits_ld_);
    be_.zero(s.d_resid);
    norm_backward(ctx_, s.d_resid, s.d_norm, x_last, norm_f_, norm_f_acts_, N);
  }
  const std::vector<int64_t>& b = grad_ready_bounds_;
  const auto ready = [&](size_t k) {  // range k of grad_ready_bounds() is final
    if (grad_ready_ && b[k] < b[k + 1]) grad_ready_(b[k], b[k + 1]);
  };
  ready(b.size() - 2);
  // Invariant at the top of each iteration: d_resid = dL/d(output of block l).
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    const ScopedRange range(be_, backward_range_[l].c_str());
    blocks_[l]->backward(ctx_, s, l == 0 ? encoded_ : blocks_[l - 1]->output(), B, T);
    ready(size_t(l) + 1);
  }
  if (cfg_.scale_embeddings) be_.scale_inplace(s.d_resid, embedding_scale(), int64_t(N) * C);
  be_.embedding_backward(ctx_.g(wte_), ctx_.g(wpe_), s.d_resid, tokens_, B, T, C);
  ready(0);
}

double Transformer::forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                     float loss_scale) {
  upload_tokens(tokens_, inputs, B, T);
  upload_tokens(targets_, targets, B, T);
  forward(B, T);
  const double l = loss(B, T, loss_scale / float(B * T), /*with_grad=*/true);
  ctx_.loss_scale = loss_scale;
  backward(B, T);
  return l;
}

std::vector<std::string> Transformer::take_notes() {
  std::vector<std::string> out;
  for (auto& b : blocks_)
    if (std::string n = b->mlp().take_note(); !n.empty()) out.push_back(std::move(n));
  return out;
}

std::vector<std::vector<int64_t>*> Transformer::step_loads() {
  std::vector<std::vector<int64_t>*> out;
  for (auto& b : blocks_)
    if (std::vector<int64_t>* l = b->mlp().step_loads()) out.push_back(l);
  return out;
}

void Transformer::after_optimizer_step() {
  for (auto& b : blocks_) b->mlp().after_optimizer_step(ctx_);
}

Transformer::MoeSummary Transformer::moe_summary() const {
  MoeSummary m;
  for (const auto& b : blocks_) {
    const Mlp::MoeStats* st = b->mlp().moe_stats();
    if (!st) continue;
    const auto [lo, hi] = std::minmax_element(st->routed.begin(), st->routed.end());
    m.load_min = m.layers == 0 ? *lo : std::min(m.load_min, *lo);
    m.load_max = std::max(m.load_max, *hi);
    m.load_mean = double(st->tokens) * cfg_.moe.top_k / cfg_.moe.n_experts;
    m.tokens = st->tokens;
    m.dropped += st->dropped;
    m.aux += st->aux;
    m.z += st->z;
    m.entropy += st->entropy;
    m.loads.push_back(st->routed);
    ++m.layers;
  }
  if (m.layers > 0) m.entropy /= m.layers;
  return m;
}

double Transformer::moe_loss() const {
  const MoeSummary m = moe_summary();
  return m.aux + m.z;
}

double Transformer::forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T) {
  upload_tokens(tokens_, inputs, B, T);
  upload_tokens(targets_, targets, B, T);
  forward(B, T);
  return loss(B, T, 0.0f, /*with_grad=*/false);
}

const Tensor& Transformer::forward_logits(const int32_t* inputs, int B, int T) {
  upload_tokens(tokens_, inputs, B, T);
  forward(B, T);
  return logits_;
}

}  // namespace eco
