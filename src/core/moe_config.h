// model.moe: the sparse Mixture-of-Experts part of a model config (docs/moe.md). n_experts 0 (no
// model.moe section) is a dense model. Parsed and validated by parse_moe_config (moe_config.cpp).
#pragma once
#include <cstdint>

#include "base/math/moe_router.h"

namespace eco {

enum class MlpKind : uint8_t;

struct MoeConfig {
  int n_experts = 0;          // routed experts per MoE layer; 0: a dense model
  int top_k = 2;              // experts per token
  int expert_hidden = 0;      // each expert's hidden width (required)
  int n_shared_experts = 0;   // always-on experts, held as one MLP of n_shared * expert_hidden
  MlpKind expert_act{};       // gelu (two matrices) or swiglu (gate|up, down); default: family's
  int every = 1;              // MoE in layers first_dense, first_dense + every, ...; dense between
  int first_dense = 0;        // the first layers stay dense (DeepSeek-MoE: 1)
  MoeRouter router = MoeRouter::TopkSoftmax;
  bool norm_topk = false;     // softmax_topk: renormalise the k gates to sum 1
  double aux_loss_coef = 1e-2;     // Switch/GShard load balance
  double z_loss_coef = 1e-3;       // ST-MoE router z-loss
  double capacity_factor = 0.0;    // 0: dropless; else capacity = ceil(T k / E * factor)
  double bias_update_rate = 1e-3;  // sigmoid_bias: the selection bias's step per optimizer step

  bool enabled() const { return n_experts > 0; }
  bool is_moe_layer(int layer) const {
    return enabled() && layer >= first_dense && (layer - first_dense) % every == 0;
  }
  // Rows of an expert's first linear: expert_hidden, or twice that for SwiGLU's gate and up.
  int64_t expert_fc_rows() const;
  int64_t shared_hidden() const { return int64_t(n_shared_experts) * expert_hidden; }
  // The most tokens an expert may keep out of `tokens` (capacity_factor > 0), else tokens.
  int64_t capacity(int64_t tokens) const;
};

const char* enum_name(MoeRouter v);  // "topk_softmax", "softmax_topk", "sigmoid_bias"

}  // namespace eco
