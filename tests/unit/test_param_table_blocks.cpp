// ParamTable::blocks (model/param_table.h): block l's recorded range holds exactly the parameters
// named "h.<l>.", in order after the embeddings and before the final norm, for every family and
// for MoE layers among dense ones.
#include <gtest/gtest.h>

#include <string>

#include "core/config.h"
#include "model/param_table.h"

namespace {

eco::ModelConfig model_of(const std::string& yaml) {
  return eco::parse_config(yaml + "data: {source: synthetic}\ntrain: {max_steps: 1}\n", "cfg.yaml")
      .model;
}

// The layer a parameter's name places it in ("h.12.attn.qkv.weight" -> 12), -1 outside blocks.
int layer_of_name(const std::string& name) {
  if (name.rfind("h.", 0) != 0) return -1;
  return std::stoi(name.substr(2, name.find('.', 2) - 2));
}

void expect_blocks_match_names(const eco::ModelConfig& m) {
  const eco::ParamTable t = eco::build_param_table(m);
  ASSERT_EQ(t.blocks.size(), size_t(m.n_layer));
  size_t expected_first = 0;
  while (expected_first < t.specs.size() && layer_of_name(t.specs[expected_first].name) < 0)
    ++expected_first;
  for (int l = 0; l < m.n_layer; ++l) {
    const eco::BlockParams& b = t.blocks[size_t(l)];
    EXPECT_EQ(b.first, expected_first) << "block " << l;
    EXPECT_LT(b.first, b.end) << "block " << l;
    for (size_t i = 0; i < t.specs.size(); ++i)
      EXPECT_EQ(layer_of_name(t.specs[i].name) == l, i >= b.first && i < b.end)
          << t.specs[i].name << " and block " << l;
    expected_first = b.end;
  }
  EXPECT_EQ(t.specs[t.blocks.back().end].name, "norm_f.weight");
}

}  // namespace

TEST(ParamTable, BlocksAreTheRunsOfTheirLayersParameters) {
  expect_blocks_match_names(model_of("model: {family: gpt2, n_layer: 3, d_model: 32}\n"));
  expect_blocks_match_names(model_of("model: {family: llama, n_layer: 2, d_model: 32}\n"));
  expect_blocks_match_names(model_of("model: {family: gemma3, n_layer: 2, d_model: 32}\n"));
  // 12 layers: two-digit layer numbers; MoE layers 1, 3, ... between dense ones.
  expect_blocks_match_names(model_of(
      "model: {family: llama, n_layer: 12, d_model: 32, moe: {n_experts: 4, expert_hidden: 8,"
      " n_shared_experts: 1, first_dense: 1, every: 2, router: sigmoid_bias}}\n"));
}
