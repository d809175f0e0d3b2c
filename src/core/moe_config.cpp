// model.moe: its table of keys (read, bounds, YAML, fingerprint) and the checks that span keys.
#include "core/moe_config.h"

#include <cmath>

#include "core/config.h"
#include "core/config_reader.h"
#include "core/config_table.h"

namespace eco {

using namespace config_reader;
using config_table::key;
using config_table::Section;

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

const config_table::Section<MoeConfig>& config_table::moe_section() {
  using C = MoeConfig;
  using L = ConfigLimits;
  const auto at_least = [](int lo) { return [lo](const int& v) { return v >= lo; }; };
  const auto non_negative = [](const double& v) { return std::isfinite(v) && v >= 0; };
  static const Section<C> section{
      "model.moe",
      {
          key("n_experts", &C::n_experts)
              .must(at_least(1), "must be >= 1", " (0, or no model.moe: a dense model)")
              .range(1, L::kMaxExperts)
              .shape(),
          key("top_k", &C::top_k)
              .check([](const C& c) {
                return c.top_k >= 1 && c.top_k <= c.n_experts
                           ? ""
                           : fmt::format("must be in [1, n_experts = {}], got {}", c.n_experts,
                                         c.top_k);
              })
              .shape(),
          key("expert_hidden", &C::expert_hidden)
              .must(at_least(1), "must be >= 1")
              .range(1, L::kMaxMlpHidden)
              .shape(),
          key("n_shared_experts", &C::n_shared_experts)
              .must(at_least(0), "must be >= 0")
              .range(0, L::kMaxExperts)
              .shape("n_shared"),
          key("expert_act", &C::expert_act, kMlpNames).shape("act"),
          key("every", &C::every).must(at_least(1), "must be >= 1").range(1, L::kMaxLayers).shape(),
          key("first_dense", &C::first_dense).shape(),  // below n_layer: a cross-key check
          key("router", &C::router, kRouterNames).shape(),
          key("norm_topk", &C::norm_topk)
              .check([](const C& c) {
                return !c.norm_topk || c.router == MoeRouter::SoftmaxTopk
                           ? ""
                           : fmt::format("applies to router softmax_topk only (router {} {})",
                                         enum_name(c.router),
                                         c.router == MoeRouter::TopkSoftmax
                                             ? "gives gates that sum to 1 already"
                                             : "always renormalises");
              })
              .shape(),
          key("aux_loss_coef", &C::aux_loss_coef)
              .must(non_negative, "must be a number >= 0")
              .range(0, 100),
          key("z_loss_coef", &C::z_loss_coef)
              .must(non_negative, "must be a number >= 0")
              .range(0, 100),
          key("capacity_factor", &C::capacity_factor)
              .must(non_negative, "must be >= 0 (0 = dropless)")
              .range(0, 1000, " (0 = dropless)"),
          key("bias_update_rate", &C::bias_update_rate)
              .must(non_negative, "must be >= 0")
              .range(0, 1)
              .when([](const C& c) { return c.router == MoeRouter::SigmoidBias; }),
      }};
  return section;
}

void read_moe_config(SectionReader& model_section, ModelConfig& m, const std::string& origin) {
  const YAML::Node node = model_section.child("moe");
  MoeConfig& c = m.moe;
  c.expert_act = m.mlp;  // the family's MLP unless model.moe.expert_act says otherwise
  if (!node || node.IsNull()) return;
  // n_experts: 0 is a dense model, as no section: the section's other keys are not read (a
  // MoE config made dense with --set model.moe.n_experts=0).
  if (const YAML::Node n = node.IsMap() ? node["n_experts"] : YAML::Node();
      n && n.IsScalar() && n.Scalar() == "0") {
    c = MoeConfig{};
    c.expert_act = m.mlp;
    return;
  }
  auto need = [&](bool ok, const char* key, const std::string& why) {
    require(ok, origin, key, why);
  };
  config_table::read_section(node, config_table::moe_section(), c, origin,
                             [&](const SectionReader& r) {
    need(c.first_dense >= 0 && c.first_dense < m.n_layer, "model.moe.first_dense",
         fmt::format("must be in [0, n_layer = {}) so that some layer is MoE, got {}", m.n_layer,
                     c.first_dense));
    need(!r.has("bias_update_rate") || c.router == MoeRouter::SigmoidBias,
         "model.moe.bias_update_rate",
         fmt::format("applies to router sigmoid_bias only (router is {})", enum_name(c.router)));
  });
  // Every derived size computed in 64 bits stays sane; the memory check then refuses what does
  // not fit.
  require_range(int64_t(c.n_shared_experts) * c.expert_hidden, 0, ConfigLimits::kMaxMlpHidden,
                origin, "model.moe.n_shared_experts", " (shared experts x expert_hidden)");
  need(!(c.router == MoeRouter::TopkSoftmax && c.top_k == 1 && c.n_experts > 1),
       "model.moe.router",
       "topk_softmax with top_k 1 gives every gate 1, so the router learns nothing from the loss; "
       "use softmax_topk (Switch's top-1) or top_k >= 2");
}

}  // namespace eco
