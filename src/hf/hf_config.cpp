// config.json for the HF classes of hf_layout.h: the keys that decide the weights' shapes and the
// forward's math, each tied to the ecotrain key it mirrors.
#include "hf/hf_config.h"

#include <sstream>

#include "base/error.h"

namespace eco {
namespace {

using json = nlohmann::json;

// One config.json key: where export writes it (dotted paths: "rope_parameters.rope_theta"),
// where import looks for it (the first path present wins), what transformers assumes when it is
// absent (null: nothing, the key is required), and the ecotrain key it mirrors.
struct Key {
  std::vector<std::string> write, read;
  json value, absent;
  std::string ours;
  bool as_float = false;  // compared after rounding both to float (ecotrain holds a float)
};

// A float config value as the double of its shortest decimal text (1e-05, not
// 9.999999747378752e-06), which reads back to the same float.
double decimal(float v) { return std::stod(fmt::format("{}", v)); }

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  return parts;
}

const json* lookup(const json& j, const std::string& path) {
  const json* at = &j;
  for (const std::string& p : split_path(path)) {
    if (!at->is_object() || !at->contains(p)) return nullptr;
    at = &(*at)[p];
  }
  return at;
}

template <class Json>
void put(Json& j, const std::string& path, const json& value) {
  Json* at = &j;
  for (const std::string& p : split_path(path)) at = &(*at)[p];
  *at = value;
}

// The keys of model m under class a.
std::vector<Key> config_keys(const ModelConfig& m, HfArch a) {
  std::vector<Key> k;
  const auto add = [&](std::vector<std::string> write, json value, json absent, std::string ours,
                       bool as_float = false, std::vector<std::string> read = {}) {
    if (read.empty()) read = write;
    k.push_back({std::move(write), std::move(read), std::move(value), std::move(absent),
                 std::move(ours), as_float});
  };
  add({"model_type"}, hf_model_type(a), nullptr, "model.family (and model.moe)");
  add({"vocab_size"}, m.vocab_size, nullptr, "model.vocab_size");
  if (a == HfArch::Gpt2) {
    add({"n_embd"}, m.d_model, nullptr, "model.d_model");
    add({"n_layer"}, m.n_layer, nullptr, "model.n_layer");
    add({"n_head"}, m.n_head, nullptr, "model.n_head");
    add({"n_positions"}, m.max_seq_len, nullptr, "model.max_seq_len");
    add({"n_inner"}, m.mlp_hidden, nullptr, "model.mlp_hidden");
    add({"layer_norm_epsilon"}, decimal(m.norm_eps), 1e-5, "model.norm_eps", true);
    add({"activation_function"}, "gelu_new", "gelu_new", "model.family (tanh GELU)");
    add({"tie_word_embeddings"}, m.tie_embeddings, true, "model.tie_embeddings");
    add({"scale_attn_weights"}, true, true, "model.family (scores / sqrt(head_dim))");
    add({"scale_attn_by_inverse_layer_idx"}, false, false, "model.family (no per-layer scale)");
    return k;
  }
  const bool moe = a == HfArch::Mixtral || a == HfArch::DeepseekMoe;
  add({"hidden_size"}, m.d_model, nullptr, "model.d_model");
  add({"num_hidden_layers"}, m.n_layer, nullptr, "model.n_layer");
  add({"num_attention_heads"}, m.n_head, nullptr, "model.n_head");
  add({"num_key_value_heads"}, m.kv_heads(), nullptr, "model.n_kv_head");
  add({"head_dim"}, m.head_dim(), a == HfArch::Gemma3 ? json(256) : json(nullptr),
      "model.head_dim");
  if (a == HfArch::Mixtral)
    add({"intermediate_size"}, m.moe.expert_hidden, nullptr, "model.moe.expert_hidden");
  else
    add({"intermediate_size"}, m.mlp_hidden, nullptr, "model.mlp_hidden");
  add({"max_position_embeddings"}, m.max_seq_len, nullptr, "");  // written, not compared
  add({"rms_norm_eps"}, decimal(m.norm_eps), a == HfArch::Mixtral ? 1e-5 : 1e-6, "model.norm_eps", true);
  add({"tie_word_embeddings"}, m.tie_embeddings, a == HfArch::Gemma3, "model.tie_embeddings");
  if (a == HfArch::Gemma3) {
    const bool any_local = m.sliding_window > 0;
    add({"rope_theta", "rope_parameters.full_attention.rope_theta"}, decimal(m.rope_theta), 1e6,
        "model.rope_theta", true, {"rope_parameters.full_attention.rope_theta", "rope_theta"});
    add({"rope_parameters.full_attention.rope_type"}, "default", "default",
        "(RoPE scaling, which ecotrain does not have)", false,
        {"rope_parameters.full_attention.rope_type", "rope_scaling.rope_type",
         "rope_scaling.type"});
    json layer_types = json::array();
    for (int l = 0; l < m.n_layer; ++l)
      layer_types.push_back(m.layer_is_local(l) ? "sliding_attention" : "full_attention");
    add({"layer_types"}, layer_types, nullptr, "model.sliding_window_pattern");
    add({"sliding_window_pattern"}, m.sliding_window_pattern, nullptr, "");
    add({"rope_local_base_freq", "rope_parameters.sliding_attention.rope_theta"},
        decimal(m.rope_local_theta), 10000.0, any_local ? "model.rope_local_theta" : "", true,
        {"rope_parameters.sliding_attention.rope_theta", "rope_local_base_freq"});
    add({"rope_parameters.sliding_attention.rope_type"}, "default", "default", "");
    // Without local layers the window is never used; HF wants a number all the same.
    add({"sliding_window"}, any_local ? m.sliding_window : m.max_seq_len, 4096,
        any_local ? "model.sliding_window" : "");
    // transformers 5 types it int: an integral value is written as one.
    const double scalar = decimal(m.query_scalar());
    add({"query_pre_attn_scalar"},
        scalar == double(int64_t(scalar)) ? json(int64_t(scalar)) : json(scalar), 256,
        "model.query_pre_attn_scalar", true);
    add({"hidden_activation"}, "gelu_pytorch_tanh", "gelu_pytorch_tanh",
        "model.family (GeGLU, tanh GELU)");
    add({"final_logit_softcapping"}, nullptr, nullptr, "model.family (no logit soft-capping)");
    add({"attn_logit_softcapping"}, nullptr, nullptr, "model.family (no attention soft-capping)");
    add({"attention_bias"}, false, false, "model.family (no linear biases)");
    add({"use_bidirectional_attention"}, false, false, "model.family (causal attention)");
    return k;
  }
  add({"rope_theta", "rope_parameters.rope_theta"}, decimal(m.rope_theta),
      a == HfArch::Mixtral ? 1e6 : 10000.0, "model.rope_theta", true,
      {"rope_parameters.rope_theta", "rope_theta"});
  add({"rope_parameters.rope_type"}, "default", "default",
      "(RoPE scaling, which ecotrain does not have)", false,
      {"rope_parameters.rope_type", "rope_scaling.rope_type", "rope_scaling.type"});
  add({"hidden_act"}, "silu", "silu", "model.family (SwiGLU)");
  if (a != HfArch::Mixtral) add({"attention_bias"}, false, false, "model.family (no biases)");
  if (a == HfArch::Llama) add({"mlp_bias"}, false, false, "model.family (no biases)");
  if (!moe) return k;
  const MoeConfig& e = m.moe;
  if (a == HfArch::Mixtral) {
    add({"num_local_experts"}, e.n_experts, nullptr, "model.moe.n_experts");
    add({"num_experts_per_tok"}, e.top_k, nullptr, "model.moe.top_k");
    add({"sliding_window"}, nullptr, nullptr, "model.sliding_window");
    add({"router_jitter_noise"}, 0.0, 0.0, "model.moe (no router noise)");
    return k;
  }
  add({"moe_intermediate_size"}, e.expert_hidden, nullptr, "model.moe.expert_hidden");
  add({"n_routed_experts"}, e.n_experts, nullptr, "model.moe.n_experts");
  add({"num_experts_per_tok"}, e.top_k, nullptr, "model.moe.top_k");
  // None, not 0, when there are none: DeepSeek-MoE builds a shared MLP unless it is None.
  add({"n_shared_experts"}, e.n_shared_experts > 0 ? json(e.n_shared_experts) : json(nullptr),
      nullptr, "model.moe.n_shared_experts");
  add({"first_k_dense_replace"}, e.first_dense, 0, "model.moe.first_dense");
  add({"moe_layer_freq"}, e.every, 1, "model.moe.every");
  add({"norm_topk_prob"}, e.router == MoeRouter::TopkSoftmax || e.norm_topk, false,
      "model.moe.router / norm_topk (gates renormalised to sum 1)");
  add({"scoring_func"}, "softmax", "softmax", "model.moe.router (softmax gates)");
  return k;
}

// transformers' derived defaults, filled into a copy of config.json before the comparison.
json with_derived_defaults(json f, HfArch a) {
  if (a == HfArch::Gpt2) {
    if (f.contains("n_inner") && f["n_inner"].is_null()) f.erase("n_inner");
    if (!f.contains("n_inner") && f.contains("n_embd") && f["n_embd"].is_number_integer())
      f["n_inner"] = 4 * f["n_embd"].get<int64_t>();
    return f;
  }
  if (a == HfArch::DeepseekMoe && f.contains("n_shared_experts") && f["n_shared_experts"] == 0)
    f["n_shared_experts"] = nullptr;
  if (!f.contains("num_key_value_heads") && f.contains("num_attention_heads"))
    f["num_key_value_heads"] = f["num_attention_heads"];
  const bool heads = f.contains("hidden_size") && f.contains("num_attention_heads") &&
                     f["hidden_size"].is_number_integer() &&
                     f["num_attention_heads"].is_number_integer() &&
                     f["num_attention_heads"].get<int64_t>() > 0;
  if ((!f.contains("head_dim") || f["head_dim"].is_null()) && a != HfArch::Gemma3 && heads)
    f["head_dim"] = f["hidden_size"].get<int64_t>() / f["num_attention_heads"].get<int64_t>();
  if (a == HfArch::Gemma3 && !f.contains("layer_types") && f.contains("num_hidden_layers") &&
      f["num_hidden_layers"].is_number_integer()) {
    // transformers 4.x: every sliding_window_pattern-th layer global (default 6).
    int64_t pattern = 6;
    for (const char* key : {"sliding_window_pattern", "_sliding_window_pattern"})
      if (f.contains(key) && f[key].is_number_integer()) pattern = f[key].get<int64_t>();
    json types = json::array();
    for (int64_t l = 0; l < f["num_hidden_layers"].get<int64_t>(); ++l)
      types.push_back(pattern > 0 && (l + 1) % pattern != 0 ? "sliding_attention"
                                                             : "full_attention");
    f["layer_types"] = types;
  }
  return f;
}

bool same_value(const json& a, const json& b, bool as_float) {
  if (as_float && a.is_number() && b.is_number())
    return float(a.get<double>()) == float(b.get<double>());
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

std::string shown(const json& v) { return clip_for_message(v.dump(), 120); }

}  // namespace

nlohmann::ordered_json hf_config_json(const ModelConfig& m, const std::string& dtype) {
  const HfArch a = hf_arch_of(m);
  nlohmann::ordered_json j;
  j["architectures"] = {hf_architecture(a)};
  for (const Key& k : config_keys(m, a))
    for (const std::string& path : k.write) put(j, path, k.value);
  j["dtype"] = dtype;        // transformers 5
  j["torch_dtype"] = dtype;  // transformers 4
  j["eco_exported_by"] = "ecotrain eco-train export";
  return j;
}

std::vector<std::string> hf_config_mismatches(const json& file, const ModelConfig& m) {
  const HfArch a = hf_arch_of(m);
  std::vector<std::string> out;
  const json* type = lookup(file, "model_type");
  if (!type || *type != hf_model_type(a)) {
    out.push_back(fmt::format("model_type is {}, the run's model (family {}{}) is {} ({})",
                              type ? shown(*type) : "absent", enum_name(m.family),
                              m.moe.enabled() ? " with model.moe" : "", hf_model_type(a),
                              hf_architecture(a)));
    return out;  // the other keys are another class's
  }
  const json f = with_derived_defaults(file, a);
  for (const Key& k : config_keys(m, a)) {
    if (k.ours.empty() || k.write.front() == "model_type") continue;
    const json* v = nullptr;
    for (const std::string& path : k.read)
      if ((v = lookup(f, path))) break;
    if (!v && k.absent.is_null() && !k.value.is_null()) {
      out.push_back(fmt::format("{} is absent, the run's {} is {}", k.read.front(), k.ours,
                                shown(k.value)));
      continue;
    }
    const json& got = v ? *v : k.absent;
    if (!same_value(got, k.value, k.as_float))
      out.push_back(fmt::format("{} is {}, the run's {} is {}", k.read.front(), shown(got),
                                k.ours, shown(k.value)));
  }
  return out;
}

}  // namespace eco
