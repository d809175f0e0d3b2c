// The name and layout mapping between ecotrain's parameter table and Hugging Face checkpoints.
#include "hf/hf_layout.h"

#include <string_view>

#include "base/error.h"

namespace eco {

const char* hf_architecture(HfArch a) {
  switch (a) {
    case HfArch::Gpt2: return "GPT2LMHeadModel";
    case HfArch::Llama: return "LlamaForCausalLM";
    case HfArch::Gemma3: return "Gemma3ForCausalLM";
    case HfArch::Mixtral: return "MixtralForCausalLM";
    case HfArch::DeepseekMoe: return "DeepseekForCausalLM";
  }
  return "?";
}

const char* hf_model_type(HfArch a) {
  switch (a) {
    case HfArch::Gpt2: return "gpt2";
    case HfArch::Llama: return "llama";
    case HfArch::Gemma3: return "gemma3_text";
    case HfArch::Mixtral: return "mixtral";
    case HfArch::DeepseekMoe: return "deepseek";
  }
  return "?";
}

HfArch hf_arch_of(const ModelConfig& m) {
  const auto refuse = [&](const std::string& why) -> HfArch {
    usage_error("this {} model has no Hugging Face equivalent: {}", enum_name(m.family), why);
  };
  if (m.family == ModelFamily::Gpt2) {
    if (m.moe.enabled()) refuse("GPT-2 has no mixture-of-experts variant in transformers");
    if (m.kv_heads() != m.n_head || m.head_dim_override > 0 || m.sliding_window > 0 ||
        m.query_pre_attn_scalar > 0)
      refuse("GPT2LMHeadModel has plain multi-head attention over d_model (model.n_kv_head, "
             "head_dim, sliding_window and query_pre_attn_scalar must keep their defaults)");
    return HfArch::Gpt2;
  }
  if (m.family == ModelFamily::Gemma3) {
    if (m.moe.enabled()) refuse("Gemma 3 has no mixture-of-experts variant in transformers");
    return HfArch::Gemma3;
  }
  if (m.sliding_window > 0 || m.query_pre_attn_scalar > 0)
    refuse("LlamaForCausalLM has no sliding window and scales queries by 1/sqrt(head_dim) "
           "(model.sliding_window and query_pre_attn_scalar must keep their defaults)");
  if (!m.moe.enabled()) return HfArch::Llama;
  const MoeConfig& e = m.moe;
  if (e.expert_act != MlpKind::Swiglu)
    refuse("Mixtral's and DeepSeek-MoE's experts are SwiGLU (model.moe.expert_act)");
  if (e.router == MoeRouter::SigmoidBias)
    refuse("the sigmoid_bias router (DeepSeek-V3's) comes with multi-head latent attention in "
           "transformers, which ecotrain does not have");
  const bool renormalised = e.router == MoeRouter::TopkSoftmax || e.norm_topk;
  if (e.n_shared_experts == 0 && e.first_dense == 0 && e.every == 1 && renormalised)
    return HfArch::Mixtral;
  // DeepSeek-MoE: layer l is MoE when l >= first_k_dense_replace and l % moe_layer_freq == 0,
  // and heads are hidden_size / num_attention_heads wide.
  if (m.head_dim() * m.n_head != m.d_model)
    refuse("DeepSeek-MoE's heads are d_model / n_head wide (model.head_dim)");
  if (e.every > 1 && e.first_dense % e.every != 0)
    refuse(fmt::format("DeepSeek-MoE puts experts in layers l >= first_k_dense_replace with l % "
                       "moe_layer_freq == 0, which model.moe.first_dense {} and every {} do not "
                       "give",
                       e.first_dense, e.every));
  return HfArch::DeepseekMoe;
}

namespace {
// Drops `prefix` from the front of `s` when `s` starts with it; says whether it did.
bool drop_prefix(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}
}  // namespace

// GPT-2's causal-mask buffers, the whole name [transformer.]h.<layer digits>.attn.[masked_]bias.
bool hf_ignorable(HfArch a, const std::string& name) {
  if (a != HfArch::Gpt2) return false;
  std::string_view s = name;
  drop_prefix(s, "transformer.");
  if (!drop_prefix(s, "h.")) return false;
  const size_t digits = s.find_first_not_of("0123456789");
  if (digits == 0 || digits == std::string_view::npos) return false;
  s.remove_prefix(digits);
  if (!drop_prefix(s, ".attn.")) return false;
  drop_prefix(s, "masked_");
  return s == "bias";
}

std::vector<HfTensorMap> hf_tensor_map(const ModelConfig& m, const ParamTable& table) {
  const HfArch arch = hf_arch_of(m);
  std::vector<HfTensorMap> out;
  std::vector<int64_t> covered(table.specs.size(), 0);  // rows of each parameter mapped
  // The whole parameter, or rows [row0, row0 + rows) of it.
  const auto map_rows = [&](const std::string& hf, const std::string& ours, int64_t row0,
                            int64_t rows, bool transposed = false) {
    const int i = table.index_of(ours);
    ECO_ASSERT(i >= 0, "hf layout: no parameter '{}' for '{}'", ours, hf);
    const ParamSpec& s = table.specs[size_t(i)];
    const int64_t cols = s.shape.size() == 2 ? s.shape[1] : 1;
    HfTensorMap t{hf, {}, size_t(i), row0, rows, cols, transposed};
    if (s.shape.size() == 1) t.hf_shape = {rows};
    else t.hf_shape = transposed ? std::vector<int64_t>{cols, rows}
                                 : std::vector<int64_t>{rows, cols};
    covered[size_t(i)] += rows;
    out.push_back(std::move(t));
  };
  const auto map = [&](const std::string& hf, const std::string& ours, bool transposed = false) {
    const int i = table.index_of(ours);
    ECO_ASSERT(i >= 0, "hf layout: no parameter '{}' for '{}'", ours, hf);
    map_rows(hf, ours, 0, table.specs[size_t(i)].shape[0], transposed);
  };
  // A SwiGLU / GeGLU first linear: rows [0, H) gate, [H, 2H) up.
  const auto map_gated = [&](const std::string& gate, const std::string& up,
                             const std::string& ours) {
    const int64_t H = table[ours].shape[0] / 2;
    map_rows(gate, ours, 0, H);
    map_rows(up, ours, H, H);
  };

  if (arch == HfArch::Gpt2) {
    const std::string t = "transformer.";
    map(t + "wte.weight", "wte");
    map(t + "wpe.weight", "wpe");
    for (int l = 0; l < m.n_layer; ++l) {
      const std::string h = fmt::format("{}h.{}.", t, l), p = fmt::format("h.{}.", l);
      map(h + "ln_1.weight", p + "norm1.weight");
      map(h + "ln_1.bias", p + "norm1.bias");
      map(h + "attn.c_attn.weight", p + "attn.qkv.weight", true);
      map(h + "attn.c_attn.bias", p + "attn.qkv.bias");
      map(h + "attn.c_proj.weight", p + "attn.proj.weight", true);
      map(h + "attn.c_proj.bias", p + "attn.proj.bias");
      map(h + "ln_2.weight", p + "norm2.weight");
      map(h + "ln_2.bias", p + "norm2.bias");
      map(h + "mlp.c_fc.weight", p + "mlp.fc.weight", true);
      map(h + "mlp.c_fc.bias", p + "mlp.fc.bias");
      map(h + "mlp.c_proj.weight", p + "mlp.proj.weight", true);
      map(h + "mlp.c_proj.bias", p + "mlp.proj.bias");
    }
    map(t + "ln_f.weight", "norm_f.weight");
    map(t + "ln_f.bias", "norm_f.bias");
  } else {
    map("model.embed_tokens.weight", "wte");
    const int64_t q_rows = m.attn_width(), kv_rows = int64_t(m.kv_heads()) * m.head_dim();
    for (int l = 0; l < m.n_layer; ++l) {
      const std::string h = fmt::format("model.layers.{}.", l), p = fmt::format("h.{}.", l);
      map(h + "input_layernorm.weight", p + "norm1.weight");
      map_rows(h + "self_attn.q_proj.weight", p + "attn.qkv.weight", 0, q_rows);
      map_rows(h + "self_attn.k_proj.weight", p + "attn.qkv.weight", q_rows, kv_rows);
      map_rows(h + "self_attn.v_proj.weight", p + "attn.qkv.weight", q_rows + kv_rows, kv_rows);
      map(h + "self_attn.o_proj.weight", p + "attn.proj.weight");
      if (arch == HfArch::Gemma3) {
        map(h + "self_attn.q_norm.weight", p + "attn.q_norm.weight");
        map(h + "self_attn.k_norm.weight", p + "attn.k_norm.weight");
        map(h + "post_attention_layernorm.weight", p + "attn.post_norm.weight");
        map(h + "pre_feedforward_layernorm.weight", p + "norm2.weight");
        map(h + "post_feedforward_layernorm.weight", p + "mlp.post_norm.weight");
      } else {
        map(h + "post_attention_layernorm.weight", p + "norm2.weight");
      }
      if (!m.moe.is_moe_layer(l)) {
        map_gated(h + "mlp.gate_proj.weight", h + "mlp.up_proj.weight", p + "mlp.fc.weight");
        map(h + "mlp.down_proj.weight", p + "mlp.proj.weight");
        continue;
      }
      if (arch == HfArch::Mixtral) {
        const std::string b = h + "block_sparse_moe.";
        map(b + "gate.weight", p + "mlp.router.weight");
        for (int e = 0; e < m.moe.n_experts; ++e) {
          const std::string x = fmt::format("{}experts.{}.", b, e);
          const std::string y = fmt::format("{}mlp.experts.{}.", p, e);
          map_gated(x + "w1.weight", x + "w3.weight", y + "fc.weight");
          map(x + "w2.weight", y + "proj.weight");
        }
        continue;
      }
      map(h + "mlp.gate.weight", p + "mlp.router.weight");
      for (int e = 0; e < m.moe.n_experts; ++e) {
        const std::string x = fmt::format("{}mlp.experts.{}.", h, e);
        const std::string y = fmt::format("{}mlp.experts.{}.", p, e);
        map_gated(x + "gate_proj.weight", x + "up_proj.weight", y + "fc.weight");
        map(x + "down_proj.weight", y + "proj.weight");
      }
      if (m.moe.n_shared_experts > 0) {
        const std::string x = h + "mlp.shared_experts.";
        map_gated(x + "gate_proj.weight", x + "up_proj.weight", p + "mlp.shared.fc.weight");
        map(x + "down_proj.weight", p + "mlp.shared.proj.weight");
      }
    }
    map("model.norm.weight", "norm_f.weight");
  }
  if (!m.tie_embeddings) map("lm_head.weight", "lm_head.weight");
  for (size_t i = 0; i < table.specs.size(); ++i)
    ECO_ASSERT(covered[i] == table.specs[i].shape[0], "hf layout: '{}' has {} rows, {} mapped",
               table.specs[i].name, table.specs[i].shape[0], covered[i]);
  return out;
}

}  // namespace eco
