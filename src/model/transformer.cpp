// Forward and backward of the GPT-2 / Llama transformer over the Backend interface.
// Shapes: B batch, T time, C d_model, NH heads, H mlp hidden, V vocab, N = B*T.
#include "model/transformer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/rng.h"

namespace eco {

Transformer::Transformer(const ModelConfig& cfg, Backend& be, int max_batch,
                         const Treatment& treatment)
    : cfg_(cfg), be_(be), table_(build_param_table(cfg)), store_(table_, treatment, be),
      max_batch_(max_batch) {
  // Parameters, gradients, saved statistics and losses in dtype(); activations, their gradients
  // and logits in act_dtype() (bf16 on CUDA).
  const DType dt = be_.dtype(), at = be_.act_dtype();
  const int64_t B = max_batch, T = cfg.seq_len, N = B * T, C = cfg.d_model, NH = cfg.n_head;
  const int64_t H = cfg.mlp_hidden, FC = cfg.fc_rows(), V = cfg.vocab_size;
  const std::vector<int64_t> att_shape = be_.attention_state_shape(int(B), int(NH), int(T));
  // The proj linear's input needs its own buffer when the forward casts it: attention_backward
  // must see the attention output as it was computed.
  const bool cast_proj_in = store_.treatment().act != ActCast::None;
  grads_ = be_.alloc("grads", {table_.total}, dt, MemCategory::Grads);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string p = fmt::format("h.{}.", l);
    layers_.push_back({index(p + "norm1.weight"), index(p + "norm1.bias"),
                       index(p + "attn.qkv.weight"), index(p + "attn.qkv.bias"),
                       index(p + "attn.proj.weight"), index(p + "attn.proj.bias"),
                       index(p + "norm2.weight"), index(p + "norm2.bias"),
                       index(p + "mlp.fc.weight"), index(p + "mlp.fc.bias"),
                       index(p + "mlp.proj.weight"), index(p + "mlp.proj.bias")});
  }
  wte_ = index("wte");
  wpe_ = index("wpe");
  norm_f_w_ = index("norm_f.weight");
  norm_f_b_ = index("norm_f.bias");
  head_ = cfg.tie_embeddings ? wte_ : index("lm_head.weight");
  tokens_ = be_.alloc("tokens", {N}, DType::I32, MemCategory::Workspace);
  targets_ = be_.alloc("targets", {N}, DType::I32, MemCategory::Workspace);
  losses_ = be_.alloc("losses", {N}, dt, MemCategory::Workspace);
  encoded_ = be_.alloc("encoded", {N, C}, at, MemCategory::Activations);
  acts_.resize(cfg.n_layer);
  for (int l = 0; l < cfg.n_layer; ++l) {
    auto& a = acts_[l];
    auto act = [&](const char* what, std::vector<int64_t> shape, DType dtype) {
      return be_.alloc(fmt::format("h.{}.{}", l, what), std::move(shape), dtype,
                       MemCategory::Activations);
    };
    a.norm1 = act("norm1", {N, C}, at);
    a.norm1_mean = act("norm1_mean", {N}, dt);
    a.norm1_rstd = act("norm1_rstd", {N}, dt);
    a.qkv = act("qkv", {N, 3 * C}, at);
    if (cfg.positions == PositionKind::Rope) a.qkv_rope = act("qkv_rope", {N, 3 * C}, at);
    a.att = act("att", att_shape, dt);
    a.atty = act("atty", {N, C}, at);
    a.proj_in = cast_proj_in ? act("proj_in", {N, C}, at) : a.atty;
    a.resid_mid = act("resid_mid", {N, C}, at);
    a.norm2 = act("norm2", {N, C}, at);
    a.norm2_mean = act("norm2_mean", {N}, dt);
    a.norm2_rstd = act("norm2_rstd", {N}, dt);
    a.fc = act("fc", {N, FC}, at);
    a.act = act("act", {N, H}, at);
    a.resid_out = act("resid_out", {N, C}, at);
  }
  norm_f_ = be_.alloc("norm_f", {N, C}, at, MemCategory::Activations);
  norm_f_mean_ = be_.alloc("norm_f_mean", {N}, dt, MemCategory::Activations);
  norm_f_rstd_ = be_.alloc("norm_f_rstd", {N}, dt, MemCategory::Activations);
  logits_ld_ = be_.logits_stride(int(V), int(C));
  logits_ = be_.alloc("logits", {N, logits_ld_}, at, MemCategory::Workspace);
  auto ws = [&](const char* what, std::vector<int64_t> shape) {
    return be_.alloc(what, std::move(shape), at, MemCategory::Workspace);
  };
  d_resid_ = ws("d_resid", {N, C});
  d_norm_ = ws("d_norm", {N, C});
  d_qkv_ = ws("d_qkv", {N, 3 * C});
  if (cfg.positions == PositionKind::Rope) d_qkv_rope_ = ws("d_qkv_rope", {N, 3 * C});
  d_atty_ = ws("d_atty", {N, C});
  d_fc_ = ws("d_fc", {N, FC});
  d_act_ = ws("d_act", {N, H});
  d_att_scratch_ = be_.alloc("d_att_scratch", att_shape, dt, MemCategory::Workspace);
  scratch_c_ = ws("scratch_c", {N, C});

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
  shapes.vocab = int(V);
  shapes.widest_linear_in = std::max(C, H);
  shapes.widest_linear_out = std::max(3 * C, FC);
  shapes.largest_weight = std::max({V * C, 3 * C * C, FC * C, C * H});
  shapes.fp8_activations = store_.treatment().act == ActCast::E4M3Row;
  be_.reserve_workspaces(shapes);
}

Tensor Transformer::grad(size_t i) const {
  return grads_.slice(table_.specs[i].offset, table_.specs[i].shape);
}

int Transformer::index(const std::string& name) const {
  for (size_t i = 0; i < table_.specs.size(); ++i)
    if (table_.specs[i].name == name) return int(i);
  return -1;
}

// A weight stored quantized goes to the backend as its QTensor: the backend decides how its
// GEMM reads the codes (CUDA: an FP8 GEMM where it can; else the emulation the CPU runs).
void Transformer::linear_forward(const Tensor& out, const Tensor& inp, const Tensor& cast_inp,
                                 int w_idx, int b_idx, int N, int C, int OC) {
  const ActCast act = store_.treatment().act;
  const ParamStore::LinearWeight lw = store_.linear_weight(size_t(w_idx));
  if (lw.quantized) {
    be_.quantized_linear_forward(out, cast_inp, inp, *lw.quantized, lw.scratch, w(b_idx), N, C,
                                 OC, act);
  } else {
    be_.cast_activations(cast_inp, inp, N, C, act);
    be_.matmul_forward(out, cast_inp, lw.dense, w(b_idx), N, C, OC);
  }
}

void Transformer::linear_backward(const Tensor& dinp, const Tensor& dout, const Tensor& cast_inp,
                                  int w_idx, int b_idx, int N, int C, int OC) {
  const ParamStore::LinearWeight lw = store_.linear_weight(size_t(w_idx));
  if (lw.quantized)
    be_.quantized_linear_backward(dinp, g(w_idx), g(b_idx), dout, cast_inp, *lw.quantized,
                                  lw.scratch, N, C, OC);
  else
    be_.matmul_backward(dinp, g(w_idx), g(b_idx), dout, cast_inp, lw.dense, N, C, OC);
}

void Transformer::zero_grad() { be_.zero(grads_); }

void Transformer::upload_tokens(const Tensor& dst, const int32_t* src, int B, int T) {
  ECO_ASSERT(B >= 1 && B <= max_batch_ && T >= 1 && T <= cfg_.seq_len,
             "batch ({}, {}) exceeds the allocated ({}, {})", B, T, max_batch_, cfg_.seq_len);
  be_.copy_from_host(dst.slice(0, {int64_t(B) * T}), src);
}

void Transformer::norm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                               const Tensor& inp, const Tensor& w, const Tensor& b, int N) {
  if (cfg_.norm == NormKind::RmsNorm)
    be_.rmsnorm_forward(out, rstd, inp, w, N, cfg_.d_model, cfg_.norm_eps);
  else
    be_.layernorm_forward(out, mean, rstd, inp, w, b, N, cfg_.d_model, cfg_.norm_eps);
}

void Transformer::residual_norm_forward(const Tensor& resid, const Tensor& out, const Tensor& mean,
                                        const Tensor& rstd, const Tensor& a, const Tensor& b,
                                        const Tensor& w, const Tensor& bias, int N) {
  const bool rms = cfg_.norm == NormKind::RmsNorm;
  be_.residual_norm_forward(resid, out, rms ? Tensor{} : mean, rstd, a, b, w,
                            rms ? Tensor{} : bias, N, cfg_.d_model, cfg_.norm_eps, rms);
}

void Transformer::norm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db,
                                const Tensor& dout, const Tensor& inp, const Tensor& w,
                                const Tensor& mean, const Tensor& rstd, int N) {
  if (cfg_.norm == NormKind::RmsNorm)
    be_.rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, cfg_.d_model);
  else
    be_.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, cfg_.d_model);
}

void Transformer::forward(int B, int T) {
  const int N = B * T, C = cfg_.d_model, NH = cfg_.n_head, H = cfg_.mlp_hidden;
  const int FC = int(cfg_.fc_rows());
  be_.embedding_forward(encoded_, tokens_, w(wte_), w(wpe_), B, T, C);  // (N, C)
  Tensor x = encoded_;
  // Every residual add is fused with the norm that reads it (Backend::residual_norm_forward):
  // norm2 of the same layer, then norm1 of the next layer or the final norm.
  norm_forward(acts_[0].norm1, acts_[0].norm1_mean, acts_[0].norm1_rstd, x,
               w(layers_[0].norm1_w), w(layers_[0].norm1_b), N);
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const ScopedRange range(be_, forward_range_[l].c_str());
    const LayerParams& p = layers_[l];
    LayerActs& a = acts_[l];
    linear_forward(a.qkv, a.norm1, a.norm1, p.qkv_w, p.qkv_b, N, C, 3 * C);  // (N, 3C)
    Tensor qkv = a.qkv;
    if (cfg_.positions == PositionKind::Rope) {
      be_.rope_forward(a.qkv_rope, a.qkv, B, T, C, NH, cfg_.rope_theta);
      qkv = a.qkv_rope;
    }
    be_.attention_forward(a.atty, a.att, qkv, B, T, C, NH);                     // (N, C)
    linear_forward(scratch_c_, a.atty, a.proj_in, p.proj_w, p.proj_b, N, C, C);  // (N, C)
    residual_norm_forward(a.resid_mid, a.norm2, a.norm2_mean, a.norm2_rstd, x, scratch_c_,
                          w(p.norm2_w), w(p.norm2_b), N);
    linear_forward(a.fc, a.norm2, a.norm2, p.fc_w, p.fc_b, N, C, FC);  // (N, FC)
    if (cfg_.mlp == MlpKind::Swiglu)
      be_.swiglu_forward(a.act, a.fc, N, H);  // (N, H)
    else
      be_.gelu_forward(a.act, a.fc, int64_t(N) * H);
    linear_forward(scratch_c_, a.act, a.act, p.mlp_proj_w, p.mlp_proj_b, N, H, C);  // (N, C)
    if (l + 1 < cfg_.n_layer) {
      LayerActs& next = acts_[l + 1];
      residual_norm_forward(a.resid_out, next.norm1, next.norm1_mean, next.norm1_rstd,
                            a.resid_mid, scratch_c_, w(layers_[l + 1].norm1_w),
                            w(layers_[l + 1].norm1_b), N);
    } else {
      residual_norm_forward(a.resid_out, norm_f_, norm_f_mean_, norm_f_rstd_, a.resid_mid,
                            scratch_c_, w(norm_f_w_), w(norm_f_b_), N);
    }
    x = a.resid_out;
  }
  const ScopedRange range(be_, "head forward");
  be_.head_forward(logits_, norm_f_, w(head_), N, C, cfg_.vocab_size, logits_ld_);  // (N, ld)
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
  const int N = B * T, C = cfg_.d_model, NH = cfg_.n_head, H = cfg_.mlp_hidden;
  const int FC = int(cfg_.fc_rows());
  const Tensor x_last = acts_.back().resid_out;

  {
    const ScopedRange range(be_, "head + final norm backward");
    be_.zero(d_norm_);
    be_.head_backward(d_norm_, g(head_), logits_, norm_f_, w(head_), N, C, cfg_.vocab_size,
                      logits_ld_);
    be_.zero(d_resid_);
    norm_backward(d_resid_, g(norm_f_w_), g(norm_f_b_), d_norm_, x_last, w(norm_f_w_),
                  norm_f_mean_, norm_f_rstd_, N);
  }
  // Invariant at the top of each iteration: d_resid_ = dL/d(resid_out of layer l).
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    const ScopedRange range(be_, backward_range_[l].c_str());
    const LayerParams& p = layers_[l];
    const LayerActs& a = acts_[l];
    const Tensor x_in = l == 0 ? encoded_ : acts_[l - 1].resid_out;
    // MLP branch: resid_out = resid_mid + proj(act(fc(norm2(resid_mid)))).
    be_.zero(d_act_);
    linear_backward(d_act_, d_resid_, a.act, p.mlp_proj_w, p.mlp_proj_b, N, H, C);
    be_.zero(d_fc_);
    if (cfg_.mlp == MlpKind::Swiglu)
      be_.swiglu_backward(d_fc_, d_act_, a.fc, N, H);
    else
      be_.gelu_backward(d_fc_, a.fc, d_act_, int64_t(N) * H);
    be_.zero(d_norm_);
    linear_backward(d_norm_, d_fc_, a.norm2, p.fc_w, p.fc_b, N, C, FC);
    norm_backward(d_resid_, g(p.norm2_w), g(p.norm2_b), d_norm_, a.resid_mid, w(p.norm2_w),
                  a.norm2_mean, a.norm2_rstd, N);  // d_resid_ = dL/d(resid_mid)
    // Attention branch: resid_mid = x_in + proj(attn(qkv(norm1(x_in)))).
    be_.zero(d_atty_);
    linear_backward(d_atty_, d_resid_, a.proj_in, p.proj_w, p.proj_b, N, C, C);
    if (cfg_.positions == PositionKind::Rope) {
      be_.zero(d_qkv_rope_);
      be_.attention_backward(d_qkv_rope_, d_att_scratch_, d_atty_, a.qkv_rope, a.atty, a.att, B,
                             T, C, NH);
      be_.zero(d_qkv_);
      be_.rope_backward(d_qkv_, d_qkv_rope_, B, T, C, NH, cfg_.rope_theta);
    } else {
      be_.zero(d_qkv_);
      be_.attention_backward(d_qkv_, d_att_scratch_, d_atty_, a.qkv, a.atty, a.att, B, T, C,
                             NH);
    }
    be_.zero(d_norm_);
    linear_backward(d_norm_, d_qkv_, a.norm1, p.qkv_w, p.qkv_b, N, C, 3 * C);
    norm_backward(d_resid_, g(p.norm1_w), g(p.norm1_b), d_norm_, x_in, w(p.norm1_w),
                  a.norm1_mean, a.norm1_rstd, N);  // d_resid_ = dL/d(x_in)
  }
  be_.embedding_backward(g(wte_), g(wpe_), d_resid_, tokens_, B, T, C);
}

double Transformer::forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                     float loss_scale) {
  upload_tokens(tokens_, inputs, B, T);
  upload_tokens(targets_, targets, B, T);
  forward(B, T);
  const double l = loss(B, T, loss_scale / float(B * T), /*with_grad=*/true);
  backward(B, T);
  return l;
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
