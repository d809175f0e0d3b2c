// Parameter tables of the block families (gpt2, llama, gemma3). Names and layouts match tools/torch_reference.py.
#include "model/param_table.h"

#include <cmath>

#include "base/error.h"
#include "base/tensor.h"

namespace eco {

const char* param_role_name(ParamRole r) {
  switch (r) {
    case ParamRole::Embedding: return "embedding";
    case ParamRole::Position: return "position";
    case ParamRole::Norm: return "norm";
    case ParamRole::Bias: return "bias";
    case ParamRole::Linear: return "linear";
    case ParamRole::Head: return "head";
    case ParamRole::Expert: return "expert";
    case ParamRole::Router: return "router";
  }
  return "?";
}

bool role_quantizable(ParamRole r) { return r == ParamRole::Linear || r == ParamRole::Expert; }

int ParamTable::index_of(const std::string& name) const {
  if (index_by_name.size() == specs.size()) {
    const auto it = index_by_name.find(name);
    return it == index_by_name.end() ? -1 : int(it->second);
  }
  for (size_t i = 0; i < specs.size(); ++i)  // a table built by hand (tests)
    if (specs[i].name == name) return int(i);
  return -1;
}

const ParamSpec& ParamTable::operator[](const std::string& name) const {
  const int i = index_of(name);
  if (i < 0) runtime_error("no parameter named '{}'", name);
  return specs[size_t(i)];
}

int64_t ParamTable::count_quantizable() const {
  int64_t n = 0;
  for (const auto& s : specs)
    if (s.quantizable) n += s.numel();
  return n;
}

std::string ParamTable::describe() const {
  std::string out = fmt::format("{:<28} {:<16} {:>12} {:<10} {:>5} {:>4}\n", "parameter", "shape",
                                "elements", "role", "quant", "wd");
  // Routed experts past the first of a layer are alike: one line for them all.
  std::string folded_prefix;
  int64_t folded = 0, folded_experts = 0;
  auto flush = [&] {
    if (folded_experts > 0)
      out += fmt::format("{:<45} {:>12}  ({} more experts like experts.0)\n",
                         folded_prefix + "experts.1..", folded, folded_experts);
    folded = folded_experts = 0;
  };
  for (const auto& s : specs) {
    const size_t at = s.name.find("mlp.experts.");
    const bool later_expert = at != std::string::npos && s.name.compare(at, 14, "mlp.experts.0.");
    if (later_expert) {
      const std::string prefix = s.name.substr(0, at + 4);
      if (prefix != folded_prefix) flush();
      folded_prefix = prefix;
      folded += s.numel();
      if (s.name.ends_with(".fc.weight")) ++folded_experts;
      continue;
    }
    flush();
    out += fmt::format("{:<28} {:<16} {:>12} {:<10} {:>5} {:>4}\n", s.name, shape_str(s.shape),
                       s.numel(), param_role_name(s.role), s.quantizable ? "yes" : "no",
                       s.weight_decay ? "yes" : "no");
  }
  flush();
  out += fmt::format("{:<28} {:<16} {:>12}  ({} quantizable)\n", "total", "", total,
                     count_quantizable());
  if (active != total)
    out += fmt::format("{:<28} {:<16} {:>12}  (a token's share: top_k of the routed experts)\n",
                       "active per token", "", active);
  return out;
}

ParamTable build_param_table(const ModelConfig& m) {
  ECO_ASSERT(m.structure_matches_family(),
             "model config: the block structure is not the {} family's (ModelConfig::set_family)",
             enum_name(m.family));
  const int64_t C = m.d_model, V = m.vocab_size, H = m.mlp_hidden;
  const bool learned_positions = m.positions == PositionKind::Learned;
  const bool norm_bias = m.norm_bias(), bias = m.linear_bias;
  const float std_base = 0.02f;
  // GPT-2: residual projections scaled by 1/sqrt(2 * n_layer).
  const float std_resid = std_base / std::sqrt(2.0f * float(m.n_layer));

  ParamTable t;
  auto add = [&](std::string name, std::vector<int64_t> shape, ParamRole role, float std_,
                 float value = 0.0f) {
    const bool matrix = shape.size() == 2;
    ParamSpec s{std::move(name), std::move(shape), role, role_quantizable(role), matrix,
                std_, value, t.total};
    t.total += s.numel();
    t.index_by_name.emplace(s.name, t.specs.size());
    t.specs.push_back(std::move(s));
  };

  // A MoE layer's MLP (model/moe_mlp.h): the router (fp32, never quantized; sigmoid_bias adds
  // its selection bias, which no gradient reaches), the routed experts (each a two-matrix MLP,
  // SwiGLU's fc being [gate | up] as the dense one's), and the shared experts as one MLP of
  // n_shared * expert_hidden (the sum of n_shared experts is that MLP). Expert linears have
  // biases when the family's linears do.
  const MoeConfig& moe = m.moe;
  int64_t routed_expert_elements = 0;
  auto add_expert = [&](const std::string& p, int64_t hidden, int64_t fc_rows) {
    const int64_t before = t.total;
    add(p + "fc.weight", {fc_rows, C}, ParamRole::Expert, std_base);
    if (bias) add(p + "fc.bias", {fc_rows}, ParamRole::Bias, 0.0f);
    add(p + "proj.weight", {C, hidden}, ParamRole::Expert, std_resid);
    if (bias) add(p + "proj.bias", {C}, ParamRole::Bias, 0.0f);
    return t.total - before;
  };
  auto add_moe_mlp = [&](const std::string& p) {
    add(p + "router.weight", {moe.n_experts, C}, ParamRole::Router, std_base);
    if (moe.router == MoeRouter::SigmoidBias)
      add(p + "router.select_bias", {moe.n_experts}, ParamRole::Router, 0.0f);
    for (int e = 0; e < moe.n_experts; ++e)
      routed_expert_elements += add_expert(fmt::format("{}experts.{}.", p, e), moe.expert_hidden,
                                           moe.expert_fc_rows());
    if (moe.n_shared_experts > 0)
      add_expert(p + "shared.", moe.shared_hidden(),
                 moe.expert_fc_rows() * moe.n_shared_experts);
  };

  add("wte", {V, C}, ParamRole::Embedding, std_base);
  // max_seq_len 0 means seq_len (as load_config resolves it; hand-built configs in tests may not).
  const int64_t positions = m.max_seq_len > 0 ? m.max_seq_len : m.seq_len;
  if (learned_positions) add("wpe", {positions, C}, ParamRole::Position, std_base);
  // Gains: 1, or 0 where the norm scales by (1 + w) (Gemma).
  const float gain = m.norm_unit_offset ? 0.0f : 1.0f;
  // The fused qkv rows: [q (n_head heads) | k (kv heads) | v (kv heads)] x head_dim (3 C for
  // multi-head attention over d_model); proj maps the n_head x head_dim output back to C.
  const int64_t QKV = m.qkv_rows(), A = m.attn_width(), hd = m.head_dim();
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string p = fmt::format("h.{}.", l);
    t.blocks.push_back({t.specs.size(), 0});
    add(p + "norm1.weight", {C}, ParamRole::Norm, 0.0f, gain);
    if (norm_bias) add(p + "norm1.bias", {C}, ParamRole::Norm, 0.0f);
    add(p + "attn.qkv.weight", {QKV, C}, ParamRole::Linear, std_base);
    if (bias) add(p + "attn.qkv.bias", {QKV}, ParamRole::Bias, 0.0f);
    if (m.qk_norm) {
      add(p + "attn.q_norm.weight", {hd}, ParamRole::Norm, 0.0f, gain);
      add(p + "attn.k_norm.weight", {hd}, ParamRole::Norm, 0.0f, gain);
    }
    add(p + "attn.proj.weight", {C, A}, ParamRole::Linear, std_resid);
    if (bias) add(p + "attn.proj.bias", {C}, ParamRole::Bias, 0.0f);
    if (m.post_norms) add(p + "attn.post_norm.weight", {C}, ParamRole::Norm, 0.0f, gain);
    add(p + "norm2.weight", {C}, ParamRole::Norm, 0.0f, gain);
    if (norm_bias) add(p + "norm2.bias", {C}, ParamRole::Norm, 0.0f);
    if (m.moe.is_moe_layer(l)) {
      add_moe_mlp(p + "mlp.");
    } else {
      // SwiGLU, GeGLU: rows [0, H) are the gate projection, rows [H, 2H) the up projection.
      add(p + "mlp.fc.weight", {m.fc_rows(), C}, ParamRole::Linear, std_base);
      if (bias) add(p + "mlp.fc.bias", {H}, ParamRole::Bias, 0.0f);
      add(p + "mlp.proj.weight", {C, H}, ParamRole::Linear, std_resid);
      if (bias) add(p + "mlp.proj.bias", {C}, ParamRole::Bias, 0.0f);
    }
    if (m.post_norms) add(p + "mlp.post_norm.weight", {C}, ParamRole::Norm, 0.0f, gain);
    t.blocks.back().end = t.specs.size();
  }
  add("norm_f.weight", {C}, ParamRole::Norm, 0.0f, gain);
  if (norm_bias) add("norm_f.bias", {C}, ParamRole::Norm, 0.0f);
  if (!m.tie_embeddings) add("lm_head.weight", {V, C}, ParamRole::Head, std_base);
  // A token passes through top_k of the n_experts routed experts of each MoE layer.
  t.active = t.total;
  if (moe.enabled())
    t.active -= routed_expert_elements / moe.n_experts * (moe.n_experts - moe.top_k);
  return t;
}

}  // namespace eco
