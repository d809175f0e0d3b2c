// model.moe: parsing, validation (every bad value or combination one line naming the key), the
// resolved YAML and the fingerprint.
#include "core/moe_config.h"

#include <cmath>

#include "core/config.h"
#include "core/config_reader.h"

namespace eco {

using namespace config_reader;

namespace {
inline constexpr EnumNames<MoeRouter, 3> kRouterNames{
    {"topk_softmax", "softmax_topk", "sigmoid_bias"}};
}  // namespace

const char* enum_name(MoeRouter v) { return kRouterNames(v); }

int64_t MoeConfig::expert_fc_rows() const {
  return mlp_gated(expert_act) ? 2 * int64_t(expert_hidden) : expert_hidden;
}

int64_t MoeConfig::capacity(int64_t tokens) const {
  if (capacity_factor <= 0) return tokens;
  const double cap = std::ceil(double(tokens) * top_k / n_experts * capacity_factor);
  return std::min<int64_t>(tokens, int64_t(cap));
}

void read_moe_config(SectionReader& model_section, ModelConfig& m, const std::string& origin) {
  const YAML::Node node = model_section.child("moe");
  MoeConfig& c = m.moe;
  c.expert_act = m.mlp;
  if (!node || node.IsNull()) return;
  SectionReader r(node, "model.moe", origin);
  r.get("n_experts", c.n_experts);
  r.get("top_k", c.top_k);
  r.get("expert_hidden", c.expert_hidden);
  r.get("n_shared_experts", c.n_shared_experts);
  r.get_enum("expert_act", c.expert_act, kMlpNames);
  r.get("every", c.every);
  r.get("first_dense", c.first_dense);
  r.get_enum("router", c.router, kRouterNames);
  r.get("norm_topk", c.norm_topk);
  r.get("aux_loss_coef", c.aux_loss_coef);
  r.get("z_loss_coef", c.z_loss_coef);
  r.get("capacity_factor", c.capacity_factor);
  r.get("bias_update_rate", c.bias_update_rate);
  r.finish();
  auto need = [&](bool ok, const char* key, const std::string& why) {
    require(ok, origin, key, why);
  };
  need(c.n_experts >= 1, "model.moe.n_experts",
       fmt::format("must be >= 1, got {} (remove model.moe for a dense model)", c.n_experts));
  need(c.top_k >= 1 && c.top_k <= c.n_experts, "model.moe.top_k",
       fmt::format("must be in [1, n_experts = {}], got {}", c.n_experts, c.top_k));
  need(c.expert_hidden >= 1, "model.moe.expert_hidden",
       fmt::format("must be >= 1, got {}", c.expert_hidden));
  need(c.n_shared_experts >= 0, "model.moe.n_shared_experts",
       fmt::format("must be >= 0, got {}", c.n_shared_experts));
  need(c.every >= 1, "model.moe.every", fmt::format("must be >= 1, got {}", c.every));
  need(c.first_dense >= 0 && c.first_dense < m.n_layer, "model.moe.first_dense",
       fmt::format("must be in [0, n_layer = {}) so that some layer is MoE, got {}", m.n_layer,
                   c.first_dense));
  need(!c.norm_topk || c.router == MoeRouter::SoftmaxTopk, "model.moe.norm_topk",
       fmt::format("applies to router softmax_topk only (router {} {})", enum_name(c.router),
                   c.router == MoeRouter::TopkSoftmax ? "gives gates that sum to 1 already"
                                                      : "always renormalises"));
  need(std::isfinite(c.aux_loss_coef) && c.aux_loss_coef >= 0, "model.moe.aux_loss_coef",
       fmt::format("must be a number >= 0, got {}", c.aux_loss_coef));
  need(std::isfinite(c.z_loss_coef) && c.z_loss_coef >= 0, "model.moe.z_loss_coef",
       fmt::format("must be a number >= 0, got {}", c.z_loss_coef));
  need(std::isfinite(c.capacity_factor) && c.capacity_factor >= 0, "model.moe.capacity_factor",
       fmt::format("must be >= 0 (0 = dropless), got {}", c.capacity_factor));
  need(std::isfinite(c.bias_update_rate) && c.bias_update_rate >= 0,
       "model.moe.bias_update_rate", fmt::format("must be >= 0, got {}", c.bias_update_rate));
  need(!r.has("bias_update_rate") || c.router == MoeRouter::SigmoidBias,
       "model.moe.bias_update_rate",
       fmt::format("applies to router sigmoid_bias only (router is {})", enum_name(c.router)));
  // Upper bounds (as for every key: every derived size computed in 64 bits stays sane; the
  // memory check then refuses what does not fit).
  using L = ConfigLimits;
  require_range(c.n_experts, 1, L::kMaxExperts, origin, "model.moe.n_experts");
  require_range(c.expert_hidden, 1, L::kMaxMlpHidden, origin, "model.moe.expert_hidden");
  require_range(c.n_shared_experts, 0, L::kMaxExperts, origin, "model.moe.n_shared_experts");
  require_range(int64_t(c.n_shared_experts) * c.expert_hidden, 0, L::kMaxMlpHidden, origin,
                "model.moe.n_shared_experts", " (shared experts x expert_hidden)");
  require_range(c.every, 1, L::kMaxLayers, origin, "model.moe.every");
  require_finite(c.aux_loss_coef, 0, 100, origin, "model.moe.aux_loss_coef");
  require_finite(c.z_loss_coef, 0, 100, origin, "model.moe.z_loss_coef");
  require_finite(c.capacity_factor, 0, 1000, origin, "model.moe.capacity_factor",
                 " (0 = dropless)");
  require_finite(c.bias_update_rate, 0, 1, origin, "model.moe.bias_update_rate");
  need(!(c.router == MoeRouter::TopkSoftmax && c.top_k == 1 && c.n_experts > 1),
       "model.moe.router",
       "topk_softmax with top_k 1 gives every gate 1, so the router learns nothing from the loss; "
       "use softmax_topk (Switch's top-1) or top_k >= 2");
}

void write_moe_yaml(YAML::Emitter& e, const MoeConfig& c) {
  e << YAML::Key << "moe" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "n_experts" << YAML::Value << c.n_experts;
  e << YAML::Key << "top_k" << YAML::Value << c.top_k;
  e << YAML::Key << "expert_hidden" << YAML::Value << c.expert_hidden;
  e << YAML::Key << "n_shared_experts" << YAML::Value << c.n_shared_experts;
  e << YAML::Key << "expert_act" << YAML::Value << enum_name(c.expert_act);
  e << YAML::Key << "every" << YAML::Value << c.every;
  e << YAML::Key << "first_dense" << YAML::Value << c.first_dense;
  e << YAML::Key << "router" << YAML::Value << enum_name(c.router);
  e << YAML::Key << "norm_topk" << YAML::Value << c.norm_topk;
  e << YAML::Key << "aux_loss_coef" << YAML::Value << c.aux_loss_coef;
  e << YAML::Key << "z_loss_coef" << YAML::Value << c.z_loss_coef;
  e << YAML::Key << "capacity_factor" << YAML::Value << c.capacity_factor;
  if (c.router == MoeRouter::SigmoidBias)
    e << YAML::Key << "bias_update_rate" << YAML::Value << c.bias_update_rate;
  e << YAML::EndMap;
}

std::string moe_fingerprint(const MoeConfig& c) {
  return fmt::format(" moe(n_experts={} top_k={} expert_hidden={} n_shared={} act={} every={} "
                     "first_dense={} router={} norm_topk={})",
                     c.n_experts, c.top_k, c.expert_hidden, c.n_shared_experts,
                     enum_name(c.expert_act), c.every, c.first_dense, enum_name(c.router),
                     c.norm_topk);
}

}  // namespace eco
