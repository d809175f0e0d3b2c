// Forward and backward of the GPT-2 / Llama transformer over the Backend interface.
// Shapes: B batch, T time, C d_model, NH heads, H mlp hidden, V vocab, N = B*T.
#include "model/transformer.h"

#include <cstring>

#include "core/error.h"
#include "core/rng.h"

namespace eco {

Transformer::Transformer(const ModelConfig& cfg, Backend& be, int max_batch)
    : cfg_(cfg), be_(be), table_(build_param_table(cfg)), max_batch_(max_batch) {
  const DType dt = be_.dtype();
  const int64_t B = max_batch, T = cfg.seq_len, N = B * T, C = cfg.d_model, NH = cfg.n_head;
  const int64_t H = cfg.mlp_hidden, FC = cfg.is_llama() ? 2 * H : H, V = cfg.vocab_size;
  params_ = be_.alloc("params", {table_.total}, dt, MemCategory::Weights);
  grads_ = be_.alloc("grads", {table_.total}, dt, MemCategory::Grads);
  tokens_ = be_.alloc("tokens", {N}, DType::I32, MemCategory::Workspace);
  targets_ = be_.alloc("targets", {N}, DType::I32, MemCategory::Workspace);
  losses_ = be_.alloc("losses", {N}, dt, MemCategory::Workspace);
  encoded_ = be_.alloc("encoded", {N, C}, dt, MemCategory::Activations);
  acts_.resize(cfg.n_layer);
  for (int l = 0; l < cfg.n_layer; ++l) {
    auto& a = acts_[l];
    auto act = [&](const char* what, std::vector<int64_t> shape) {
      return be_.alloc(fmt::format("h.{}.{}", l, what), std::move(shape), dt,
                       MemCategory::Activations);
    };
    a.norm1 = act("norm1", {N, C});
    a.norm1_mean = act("norm1_mean", {N});
    a.norm1_rstd = act("norm1_rstd", {N});
    a.qkv = act("qkv", {N, 3 * C});
    if (cfg.is_llama()) a.qkv_rope = act("qkv_rope", {N, 3 * C});
    a.att = act("att", {B, NH, T, T});
    a.atty = act("atty", {N, C});
    a.resid_mid = act("resid_mid", {N, C});
    a.norm2 = act("norm2", {N, C});
    a.norm2_mean = act("norm2_mean", {N});
    a.norm2_rstd = act("norm2_rstd", {N});
    a.fc = act("fc", {N, FC});
    a.act = act("act", {N, H});
    a.resid_out = act("resid_out", {N, C});
  }
  norm_f_ = be_.alloc("norm_f", {N, C}, dt, MemCategory::Activations);
  norm_f_mean_ = be_.alloc("norm_f_mean", {N}, dt, MemCategory::Activations);
  norm_f_rstd_ = be_.alloc("norm_f_rstd", {N}, dt, MemCategory::Activations);
  logits_ = be_.alloc("logits", {N, V}, dt, MemCategory::Workspace);
  auto ws = [&](const char* what, std::vector<int64_t> shape) {
    return be_.alloc(what, std::move(shape), dt, MemCategory::Workspace);
  };
  d_resid_ = ws("d_resid", {N, C});
  d_norm_ = ws("d_norm", {N, C});
  d_qkv_ = ws("d_qkv", {N, 3 * C});
  if (cfg.is_llama()) d_qkv_rope_ = ws("d_qkv_rope", {N, 3 * C});
  d_atty_ = ws("d_atty", {N, C});
  d_fc_ = ws("d_fc", {N, FC});
  d_act_ = ws("d_act", {N, H});
  d_att_scratch_ = ws("d_att_scratch", {B, NH, T, T});
  scratch_c_ = ws("scratch_c", {N, C});
}

Tensor Transformer::param(size_t i) const {
  return params_.slice(table_.specs[i].offset, table_.specs[i].shape);
}
Tensor Transformer::grad(size_t i) const {
  return grads_.slice(table_.specs[i].offset, table_.specs[i].shape);
}

Tensor Transformer::view(const Tensor& flat, const std::string& name) const {
  for (const auto& s : table_.specs)
    if (s.name == name) return flat.slice(s.offset, s.shape);
  return Tensor{};  // absent in this family (e.g. biases in llama): an empty tensor
}

Transformer::LayerParams Transformer::layer_views(const Tensor& flat, int l) const {
  const std::string p = fmt::format("h.{}.", l);
  return {view(flat, p + "norm1.weight"),    view(flat, p + "norm1.bias"),
          view(flat, p + "attn.qkv.weight"), view(flat, p + "attn.qkv.bias"),
          view(flat, p + "attn.proj.weight"), view(flat, p + "attn.proj.bias"),
          view(flat, p + "norm2.weight"),    view(flat, p + "norm2.bias"),
          view(flat, p + "mlp.fc.weight"),   view(flat, p + "mlp.fc.bias"),
          view(flat, p + "mlp.proj.weight"), view(flat, p + "mlp.proj.bias")};
}

void Transformer::init_weights(uint64_t seed) {
  std::vector<double> host(size_t(table_.total));
  for (size_t i = 0; i < table_.specs.size(); ++i) {
    const auto& s = table_.specs[i];
    // One stream per parameter, so adding a parameter does not shift the others' values.
    Rng rng(seed * 0x100000001B3ull + i);
    for (int64_t k = 0; k < s.numel(); ++k)
      host[s.offset + k] = s.init_std > 0 ? s.init_std * rng.normal() : s.init_value;
  }
  if (params_.dtype == DType::F64) {
    be_.copy_from_host(params_, host.data());
  } else {
    std::vector<float> f(host.begin(), host.end());
    be_.copy_from_host(params_, f.data());
  }
}

void Transformer::zero_grad() { be_.zero(grads_); }

void Transformer::upload_tokens(const Tensor& dst, const int32_t* src, int B, int T) {
  ECO_ASSERT(B >= 1 && B <= max_batch_ && T >= 1 && T <= cfg_.seq_len,
             "batch ({}, {}) exceeds the allocated ({}, {})", B, T, max_batch_, cfg_.seq_len);
  be_.copy_from_host(dst.slice(0, {int64_t(B) * T}), src);
}

void Transformer::norm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                               const Tensor& inp, const Tensor& w, const Tensor& b, int N) {
  if (cfg_.is_llama())
    be_.rmsnorm_forward(out, rstd, inp, w, N, cfg_.d_model, cfg_.norm_eps);
  else
    be_.layernorm_forward(out, mean, rstd, inp, w, b, N, cfg_.d_model, cfg_.norm_eps);
}

void Transformer::norm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db,
                                const Tensor& dout, const Tensor& inp, const Tensor& w,
                                const Tensor& mean, const Tensor& rstd, int N) {
  if (cfg_.is_llama())
    be_.rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, cfg_.d_model);
  else
    be_.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, cfg_.d_model);
}

void Transformer::forward(int B, int T) {
  const int N = B * T, C = cfg_.d_model, NH = cfg_.n_head, H = cfg_.mlp_hidden;
  const int FC = cfg_.is_llama() ? 2 * H : H;
  const Tensor wpe = view(params_, "wpe");
  be_.embedding_forward(encoded_, tokens_, view(params_, "wte"), wpe, B, T, C);  // (N, C)
  Tensor x = encoded_;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const LayerParams p = layer_views(params_, l);
    LayerActs& a = acts_[l];
    norm_forward(a.norm1, a.norm1_mean, a.norm1_rstd, x, p.norm1_w, p.norm1_b, N);
    be_.matmul_forward(a.qkv, a.norm1, p.qkv_w, p.qkv_b, N, C, 3 * C);  // (N, 3C)
    Tensor qkv = a.qkv;
    if (cfg_.is_llama()) {
      be_.rope_forward(a.qkv_rope, a.qkv, B, T, C, NH, cfg_.rope_theta);
      qkv = a.qkv_rope;
    }
    be_.attention_forward(a.atty, a.att, qkv, B, T, C, NH);               // (N, C)
    be_.matmul_forward(scratch_c_, a.atty, p.proj_w, p.proj_b, N, C, C);  // (N, C)
    be_.residual_forward(a.resid_mid, x, scratch_c_, int64_t(N) * C);
    norm_forward(a.norm2, a.norm2_mean, a.norm2_rstd, a.resid_mid, p.norm2_w, p.norm2_b, N);
    be_.matmul_forward(a.fc, a.norm2, p.fc_w, p.fc_b, N, C, FC);  // (N, FC)
    if (cfg_.is_llama())
      be_.swiglu_forward(a.act, a.fc, N, H);  // (N, H)
    else
      be_.gelu_forward(a.act, a.fc, int64_t(N) * H);
    be_.matmul_forward(scratch_c_, a.act, p.mlp_proj_w, p.mlp_proj_b, N, H, C);  // (N, C)
    be_.residual_forward(a.resid_out, a.resid_mid, scratch_c_, int64_t(N) * C);
    x = a.resid_out;
  }
  norm_forward(norm_f_, norm_f_mean_, norm_f_rstd_, x, view(params_, "norm_f.weight"),
               view(params_, "norm_f.bias"), N);
  const Tensor head = cfg_.tie_embeddings ? view(params_, "wte") : view(params_, "lm_head.weight");
  be_.matmul_forward(logits_, norm_f_, head, Tensor{}, N, C, cfg_.vocab_size);  // (N, V)
}

double Transformer::loss(int B, int T, float dloss_per_row, bool with_grad) {
  const int N = B * T;
  be_.crossentropy_forward_backward(losses_, with_grad ? logits_ : Tensor{}, logits_, targets_, N,
                                    cfg_.vocab_size, dloss_per_row);
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
  const int FC = cfg_.is_llama() ? 2 * H : H;
  const bool tied = cfg_.tie_embeddings;
  const Tensor head = tied ? view(params_, "wte") : view(params_, "lm_head.weight");
  const Tensor dhead = tied ? view(grads_, "wte") : view(grads_, "lm_head.weight");
  const Tensor x_last = acts_.back().resid_out;

  be_.zero(d_norm_);
  be_.matmul_backward(d_norm_, dhead, Tensor{}, logits_, norm_f_, head, N, C, cfg_.vocab_size);
  be_.zero(d_resid_);
  norm_backward(d_resid_, view(grads_, "norm_f.weight"), view(grads_, "norm_f.bias"), d_norm_,
                x_last, view(params_, "norm_f.weight"), norm_f_mean_, norm_f_rstd_, N);
  // Invariant at the top of each iteration: d_resid_ = dL/d(resid_out of layer l).
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    const LayerParams p = layer_views(params_, l);
    const LayerParams g = layer_views(grads_, l);
    const LayerActs& a = acts_[l];
    const Tensor x_in = l == 0 ? encoded_ : acts_[l - 1].resid_out;
    // MLP branch: resid_out = resid_mid + proj(act(fc(norm2(resid_mid)))).
    be_.zero(d_act_);
    be_.matmul_backward(d_act_, g.mlp_proj_w, g.mlp_proj_b, d_resid_, a.act, p.mlp_proj_w, N, H,
                        C);
    be_.zero(d_fc_);
    if (cfg_.is_llama())
      be_.swiglu_backward(d_fc_, d_act_, a.fc, N, H);
    else
      be_.gelu_backward(d_fc_, a.fc, d_act_, int64_t(N) * H);
    be_.zero(d_norm_);
    be_.matmul_backward(d_norm_, g.fc_w, g.fc_b, d_fc_, a.norm2, p.fc_w, N, C, FC);
    norm_backward(d_resid_, g.norm2_w, g.norm2_b, d_norm_, a.resid_mid, p.norm2_w, a.norm2_mean,
                  a.norm2_rstd, N);  // d_resid_ = dL/d(resid_mid)
    // Attention branch: resid_mid = x_in + proj(attn(qkv(norm1(x_in)))).
    be_.zero(d_atty_);
    be_.matmul_backward(d_atty_, g.proj_w, g.proj_b, d_resid_, a.atty, p.proj_w, N, C, C);
    if (cfg_.is_llama()) {
      be_.zero(d_qkv_rope_);
      be_.attention_backward(d_qkv_rope_, d_att_scratch_, d_atty_, a.qkv_rope, a.att, B, T, C,
                             NH);
      be_.zero(d_qkv_);
      be_.rope_backward(d_qkv_, d_qkv_rope_, B, T, C, NH, cfg_.rope_theta);
    } else {
      be_.zero(d_qkv_);
      be_.attention_backward(d_qkv_, d_att_scratch_, d_atty_, a.qkv, a.att, B, T, C, NH);
    }
    be_.zero(d_norm_);
    be_.matmul_backward(d_norm_, g.qkv_w, g.qkv_b, d_qkv_, a.norm1, p.qkv_w, N, C, 3 * C);
    norm_backward(d_resid_, g.norm1_w, g.norm1_b, d_norm_, x_in, p.norm1_w, a.norm1_mean,
                  a.norm1_rstd, N);  // d_resid_ = dL/d(x_in)
  }
  be_.embedding_backward(view(grads_, "wte"), view(grads_, "wpe"), d_resid_, tokens_, B, T, C);
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
