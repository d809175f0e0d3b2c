// model.moe: defaults, the resolved YAML round trip, the layer choice, and every bad value or
// combination refused with one line naming the key.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/config.h"
#include "expect_usage_error.h"

namespace {

// A 4-layer model with 8 experts, top-2; `moe` adds keys to model.moe (", key: value, ...")
// and may repeat one of these three to change it (the later value wins, as in --set).
std::string moe_yaml(const std::string& moe, const std::string& extra = "") {
  return "model: {n_layer: 4, moe: {" + moe.substr(moe.empty() ? 0 : 2) +
         "}}\ndata: {source: synthetic}\ntrain: {max_steps: 10}\n" + extra;
}

eco::Config parse(const std::string& yaml) {
  std::vector<std::string> defaults;
  for (const char* kv : {"n_experts=8", "top_k=2", "expert_hidden=64"})
    if (yaml.find(std::string(kv).substr(0, std::string(kv).find('=')) + ":") == std::string::npos)
      defaults.push_back(std::string("model.moe.") + kv);
  return eco::parse_config(yaml, "moe.yaml", defaults);
}

void expect_moe_error(const std::string& yaml, std::initializer_list<std::string> parts) {
  expect_usage_error([&] { parse(yaml); }, parts);
  try {
    parse(yaml);
  } catch (const eco::Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

TEST(MoeConfig, NoSectionIsADenseModel) {
  const eco::Config c =
      eco::parse_config("data: {source: synthetic}\ntrain: {max_steps: 1}\n", "dense.yaml");
  EXPECT_FALSE(c.model.moe.enabled());
  EXPECT_EQ(eco::to_yaml(c).find("moe"), std::string::npos);
}

TEST(MoeConfig, ZeroExpertsIsADenseModelWhateverTheOtherKeys) {
  const eco::Config c = parse(moe_yaml(", n_experts: 0, top_k: 9, router: sigmoid_bias"));
  EXPECT_FALSE(c.model.moe.enabled());
  EXPECT_EQ(eco::to_yaml(c).find("moe"), std::string::npos);
  const eco::Config dense =
      eco::parse_config("model: {n_layer: 4}\ndata: {source: synthetic}\ntrain: {max_steps: 10}\n",
                        "dense.yaml");
  EXPECT_EQ(eco::to_yaml(c), eco::to_yaml(dense));
}

TEST(MoeConfig, DefaultsAreDroplessTopkSoftmaxWithAuxAndZLoss) {
  const eco::MoeConfig m = parse(moe_yaml("")).model.moe;
  EXPECT_EQ(m.n_experts, 8);
  EXPECT_EQ(m.router, eco::MoeRouter::TopkSoftmax);
  EXPECT_EQ(m.capacity_factor, 0.0);
  EXPECT_EQ(m.aux_loss_coef, 1e-2);
  EXPECT_EQ(m.z_loss_coef, 1e-3);
  EXPECT_EQ(m.expert_act, eco::MlpKind::Gelu);  // the gpt2 family's
  EXPECT_EQ(m.capacity(100), 100);
}

TEST(MoeConfig, ResolvedYamlRoundTripsAndNamesTheRouter) {
  const std::string yaml = eco::to_yaml(
      parse(moe_yaml(", router: softmax_topk, norm_topk: true, n_shared_experts: 2")));
  EXPECT_NE(yaml.find("router: softmax_topk"), std::string::npos);
  EXPECT_EQ(eco::to_yaml(eco::parse_config(yaml, "resolved.yaml")), yaml);
}

TEST(MoeConfig, LayersAreEveryNthAfterTheFirstDense) {
  const eco::MoeConfig m = parse(moe_yaml(", every: 2, first_dense: 1")).model.moe;
  EXPECT_FALSE(m.is_moe_layer(0));
  EXPECT_TRUE(m.is_moe_layer(1));
  EXPECT_FALSE(m.is_moe_layer(2));
  EXPECT_TRUE(m.is_moe_layer(3));
}

TEST(MoeConfig, CapacityIsTheCeilingOfTokensTimesKOverExpertsTimesTheFactor) {
  const eco::MoeConfig m = parse(moe_yaml(", capacity_factor: 1.25")).model.moe;
  EXPECT_EQ(m.capacity(100), 32);  // ceil(100 * 2 / 8 * 1.25) = ceil(31.25)
}

TEST(MoeConfig, BadValuesAreRefusedNamingTheKey) {
  expect_moe_error(moe_yaml(", n_experts: -1"), {"moe.yaml", "model.moe.n_experts", ">= 1"});
  expect_moe_error(moe_yaml(", top_k: 9"), {"model.moe.top_k", "[1, n_experts = 8]"});
  expect_moe_error(moe_yaml(", top_k: 0"), {"model.moe.top_k"});
  expect_moe_error(moe_yaml(", expert_hidden: 0"), {"model.moe.expert_hidden", ">= 1"});
  expect_moe_error(moe_yaml(", n_shared_experts: -1"), {"model.moe.n_shared_experts"});
  expect_moe_error(moe_yaml(", every: 0"), {"model.moe.every"});
  expect_moe_error(moe_yaml(", first_dense: 4"), {"model.moe.first_dense", "n_layer = 4"});
  expect_moe_error(moe_yaml(", capacity_factor: -1"), {"model.moe.capacity_factor", "dropless"});
  expect_moe_error(moe_yaml(", aux_loss_coef: -0.1"), {"model.moe.aux_loss_coef"});
  expect_moe_error(moe_yaml(", z_loss_coef: -1"), {"model.moe.z_loss_coef"});
  expect_moe_error(moe_yaml(", router: argmax"), {"model.moe.router", "'topk_softmax'"});
  expect_moe_error(moe_yaml(", expert_act: relu"), {"model.moe.expert_act", "'swiglu'"});
  expect_moe_error(moe_yaml(", experts: 4"), {"unknown key 'model.moe.experts'"});
}

TEST(MoeConfig, ImplausibleSizesAndCoefficientsNameTheirLimit) {
  expect_moe_error(moe_yaml(", n_experts: 1000000000"), {"model.moe.n_experts", "[1, 65536]"});
  expect_moe_error(moe_yaml(", expert_hidden: 2000000000"),
                   {"model.moe.expert_hidden", "[1, 4194304]"});
  expect_moe_error(moe_yaml(", n_shared_experts: 60000, expert_hidden: 4096"),
                   {"model.moe.n_shared_experts", "shared experts x expert_hidden"});
  expect_moe_error(moe_yaml(", aux_loss_coef: .inf"), {"model.moe.aux_loss_coef"});
  expect_moe_error(moe_yaml(", z_loss_coef: 1e300"), {"model.moe.z_loss_coef", "[0, 100]"});
  expect_moe_error(moe_yaml(", capacity_factor: 1e30"), {"model.moe.capacity_factor", "1000"});
  expect_moe_error(moe_yaml(", router: sigmoid_bias, bias_update_rate: 5"),
                   {"model.moe.bias_update_rate", "[0, 1]"});
}

TEST(MoeConfig, BadCombinationsAreRefusedNamingTheKey) {
  expect_moe_error(moe_yaml(", norm_topk: true"), {"model.moe.norm_topk", "softmax_topk"});
  expect_moe_error(moe_yaml(", router: softmax_topk, bias_update_rate: 0.01"),
                   {"model.moe.bias_update_rate", "sigmoid_bias"});
  expect_moe_error(moe_yaml(", top_k: 1"), {"model.moe.router", "top_k 1"});
}

TEST(MoeConfig, TrainsOnEitherDevice) {
  EXPECT_EQ(parse(moe_yaml("", "device: cuda\n")).device, eco::Device::Cuda);
  EXPECT_EQ(parse(moe_yaml("", "device: cpu\n")).device, eco::Device::Cpu);
}

TEST(MoeConfig, FingerprintChangesWithTheExperts) {
  EXPECT_NE(eco::model_fingerprint(parse(moe_yaml(""))),
            eco::model_fingerprint(parse(moe_yaml(", n_experts: 16"))));
}

}  // namespace
