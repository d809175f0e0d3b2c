// What the model's parts (attention, MLP, norms, linears) share: the config, the backend, the
// parameter store and the flat gradient buffer, with lookups by table index; plus the norms,
// which every part calls (plain, or fused with the residual add before them).
#pragma once
#include <string>

#include "core/config.h"
#include "base/backend.h"
#include "model/expert_exchange.h"
#include "model/expert_parallel.h"
#include "model/param_store.h"

namespace eco {

struct ModelContext {
  const ModelConfig& cfg;
  Backend& be;
  ParamStore& store;
  const Tensor& grads;  // all gradients, laid out in table order (ParamSpec::offset)
  // The factor of this micro-batch's loss in the step's objective (forward_backward's
  // loss_scale): the backward of a loss term added inside the model (MoE aux and z losses)
  // takes it, as the cross-entropy's gradient does.
  float loss_scale = 1.0f;
  // Expert parallelism (model/expert_parallel.h); null or ep 1: every expert is here.
  const ExpertParallel* ep = nullptr;
  // Expert parallelism: the MoE layers' way to the other ranks (null for a plan's model, which
  // runs nothing, and at ep 1).
  ExpertExchange* exchange = nullptr;

  // Gemma's norms scale by (1 + w) (ModelConfig::norm_unit_offset): norm_gain() writes 1 + w
  // into a gain scratch (max(d_model, head_dim) wide, from `ones` by residual_forward) for the
  // kernels, which take the gain itself. The gain's gradient is w's: d(1 + w)/dw = 1.
  Tensor ones = {}, gain_scratch0 = {}, gain_scratch1 = {};

  // Index into the parameter table; -1 when the family has no such parameter.
  int index(const std::string& name) const;
  // Parameter i's compute view (ParamStore::compute); empty for -1.
  Tensor w(int i) const { return i < 0 ? Tensor{} : store.compute(size_t(i)); }
  // Parameter i's gradient, a view of grads; empty for -1.
  Tensor g(int i) const;
};

// A norm's parameters (bias -1 for RMSNorm) and the activations its forward saves.
struct NormRef {
  int weight = -1, bias = -1;
};
struct NormActs {
  Tensor out, mean, rstd;  // (N, C), (N), (N); mean unused by RMSNorm
};

// The gain the norm kernels multiply by for norm weight i of n elements: w, or 1 + w written
// into ctx.gain_scratch<slot> under norm_unit_offset (valid until that slot's next use).
Tensor norm_gain(const ModelContext& ctx, int i, int64_t n, int slot = 0);

// out = the family's norm of inp (LayerNorm or RMSNorm).
void norm_forward(const ModelContext& ctx, const NormActs& a, const Tensor& inp, NormRef p, int N);
// resid = x + y, then the family's norm of resid (Backend::residual_norm_forward, fused on CUDA).
void residual_norm_forward(const ModelContext& ctx, const Tensor& resid, const NormActs& a,
                           const Tensor& x, const Tensor& y, NormRef p, int N);
// dinp += the norm's input gradient from dout; its weight and bias gradients accumulate.
void norm_backward(const ModelContext& ctx, const Tensor& dinp, const Tensor& dout,
                   const Tensor& inp, NormRef p, const NormActs& a, int N);

// The temporaries one layer uses while it runs, one set shared by every layer (act_dtype; d_att
// in dtype): out_c holds a half-block's output before its residual add, the rest the backward's
// gradients.
struct BlockScratch {
  // Widths: d_qkv* (N, qkv_rows), d_atty (N, attn_width), the rest (N, d_model) or the MLP's.
  // d_qkv_normed: the gradient at the QK-norm's output (qk_norm); d_post: at a post-norm's
  // input (post_norms).
  Tensor d_resid, d_norm, d_qkv, d_qkv_rope, d_qkv_normed, d_atty, d_fc, d_act, d_att, out_c,
      d_post;
  // MoE layers' (model/moe_mlp.h), allocated when the model has them: rows (N k, C) (the
  // experts' output gradient, then their input gradient), the experts' hidden (N k, FC) and
  // activation (N k, H) gradients, the router's logits (N, E) and gates (N, k) gradients.
  // Under expert parallelism moe_d_fc and moe_d_act hold the rows of this rank's experts (ep x
  // N k), and moe_ep_d_rows their output, then input, gradient.
  Tensor moe_d_rows, moe_d_fc, moe_d_act, moe_d_logits, moe_d_gates, moe_ep_d_rows;
};

}  // namespace eco
