// The MoE router's per-token element math, shared by both backends (docs/moe.md):
// top-k with ties to the lower expert id, the three router modes' forward and backward, and the
// per-token gradient terms of the load-balance (aux) and z losses. One token at a time, no
// scratch beyond the caller's arrays, so a CUDA thread (or warp) per token can run it as is.
#pragma once
#include <cmath>
#include <cstdint>

#include "base/math/activations.h"
#include "base/math/hd.h"

namespace eco {

// How gates come from the router logits z (E) of a token (model.moe.router):
//   TopkSoftmax: idx = top-k(z); g = softmax(z[idx]) (sums to 1; Megatron's default, Mixtral).
//   SoftmaxTopk: p = softmax(z); idx = top-k(p); g = p[idx], renormalised to sum 1 if norm_topk
//                (DeepSpeed, MegaBlocks, DeepSeek-MoE without renormalisation).
//   SigmoidBias: s = sigmoid(z); idx = top-k(s + b); g = s[idx] / sum s[idx] (DeepSeek-V3); the
//                bias b only selects and gets no gradient.
enum class MoeRouter : uint8_t { TopkSoftmax, SoftmaxTopk, SigmoidBias };

ECO_HD float eco_log(float x) { return logf(x); }
ECO_HD double eco_log(double x) { return log(x); }

template <class T>
ECO_HD T moe_sigmoid(T z) {
  return T(1) / (T(1) + eco_exp(-z));
}

// idx (k) = the experts of the k largest key(e), e in [0, E), largest first; equal keys: the
// lower expert id first (deterministic routing). O(E k^2), fine for E <= a few hundred.
template <class Key>
ECO_HD void moe_topk(int32_t* idx, int E, int k, Key key) {
  for (int j = 0; j < k; ++j) {
    int best = -1;
    decltype(key(0)) best_key{};
    for (int e = 0; e < E; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || idx[i] == e;
      if (taken) continue;
      const auto v = key(e);
      if (best < 0 || v > best_key) {
        best = e;
        best_key = v;
      }
    }
    idx[j] = best;
  }
}

// p (E) = softmax(z); returns logsumexp(z).
template <class T>
ECO_HD T moe_softmax(T* p, const T* z, int E) {
  T m = z[0];
  for (int e = 1; e < E; ++e) m = z[e] > m ? z[e] : m;
  T s = 0;
  for (int e = 0; e < E; ++e) {
    p[e] = eco_exp(z[e] - m);
    s += p[e];
  }
  for (int e = 0; e < E; ++e) p[e] /= s;
  return m + eco_log(s);
}

// Routes one token: idx (k) and gates (k) from its logits z (E); probs (E) = softmax(z) over all
// experts (the aux loss's P and the backward); returns lse = logsumexp(z) (the z-loss).
// select_bias (E) is read by SigmoidBias only. SoftmaxTopk selects on z, which orders the experts
// as p does but without ties made by rounding p.
template <class T>
ECO_HD T moe_route_token(int32_t* idx, T* gates, T* probs, const T* z, const T* select_bias,
                         int E, int k, MoeRouter mode, bool norm_topk) {
  const T lse = moe_softmax(probs, z, E);
  if (mode == MoeRouter::SigmoidBias) {
    moe_topk(idx, E, k, [&](int e) { return moe_sigmoid(z[e]) + select_bias[e]; });
    T s = 0;
    for (int j = 0; j < k; ++j) s += gates[j] = moe_sigmoid(z[idx[j]]);
    for (int j = 0; j < k; ++j) gates[j] /= s;
    return lse;
  }
  moe_topk(idx, E, k, [&](int e) { return z[e]; });
  if (mode == MoeRouter::TopkSoftmax) {
    const T m = z[idx[0]];  // the largest selected logit
    T s = 0;
    for (int j = 0; j < k; ++j) s += gates[j] = eco_exp(z[idx[j]] - m);
    for (int j = 0; j < k; ++j) gates[j] /= s;
  } else {
    T s = 0;
    for (int j = 0; j < k; ++j) s += gates[j] = probs[idx[j]];
    if (norm_topk)
      for (int j = 0; j < k; ++j) gates[j] /= s;
  }
  return lse;
}

// One token's router backward, accumulated into dz (E) = dL/dz:
//   the gates' gradient dgates (k) = dL/dg through the mode's gate function (docs/moe.md), plus
//   the aux loss: aux_w (E) = dAux/dp_i (the same for every token: c E n_i / (k T^2), times the
//     loss scale; null for none), through the softmax backward p * (aux_w - <p, aux_w>), plus
//   the z-loss: z_coef lse p (z_coef = 2 c_z / T times the loss scale).
// idx, gates, probs, lse as moe_route_token returned them for these logits z.
template <class T>
ECO_HD void moe_router_backward_token(T* dz, const T* dgates, const int32_t* idx, const T* gates,
                                      const T* probs, const T* z, T lse, const T* aux_w,
                                      T z_coef, int E, int k, MoeRouter mode, bool norm_topk) {
  T gG = 0;  // <g, G>
  for (int j = 0; j < k; ++j) gG += gates[j] * dgates[j];
  if (mode == MoeRouter::TopkSoftmax) {
    for (int j = 0; j < k; ++j) dz[idx[j]] += gates[j] * (dgates[j] - gG);
  } else if (mode == MoeRouter::SigmoidBias) {
    // g_j = s_j / S: ds_j = (G_j - <g, G>) / S, then ds/dz = s (1 - s).
    T S = 0;
    for (int j = 0; j < k; ++j) S += moe_sigmoid(z[idx[j]]);
    for (int j = 0; j < k; ++j) {
      const T s = moe_sigmoid(z[idx[j]]);
      dz[idx[j]] += (dgates[j] - gG) / S * s * (T(1) - s);
    }
  } else {
    // dL/dp on the selected experts (through the renormalisation g_j = p_j / S if norm_topk),
    // then the softmax backward over all E: dz = p * (dp - <p, dp>).
    T S = 0;
    for (int j = 0; j < k; ++j) S += probs[idx[j]];
    T pdp = 0;
    for (int j = 0; j < k; ++j) {
      const T dp = norm_topk ? (dgates[j] - gG) / S : dgates[j];
      pdp += probs[idx[j]] * dp;
    }
    for (int e = 0; e < E; ++e) {
      T dp = 0;
      for (int j = 0; j < k; ++j)
        if (idx[j] == e) dp = norm_topk ? (dgates[j] - gG) / S : dgates[j];
      dz[e] += probs[e] * (dp - pdp);
    }
  }
  if (aux_w) {
    T pw = 0;
    for (int e = 0; e < E; ++e) pw += probs[e] * aux_w[e];
    for (int e = 0; e < E; ++e) dz[e] += probs[e] * (aux_w[e] - pw);
  }
  if (z_coef != T(0))
    for (int e = 0; e < E; ++e) dz[e] += z_coef * lse * probs[e];
}

// -sum_e p_e log p_e of one token's softmax (the router entropy metric; 0 log 0 = 0).
template <class T>
ECO_HD T moe_entropy(const T* probs, int E) {
  T h = 0;
  for (int e = 0; e < E; ++e)
    if (probs[e] > T(0)) h -= probs[e] * eco_log(probs[e]);
  return h;
}

}  // namespace eco
