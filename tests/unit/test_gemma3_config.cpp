// model.family gemma3 and the attention keys (n_kv_head, head_dim, sliding_window, ...): the
// family's defaults, validation naming the key, the CUDA head-size limit at run time, and that
// configs of the other families keep their resolved YAML and fingerprint.
#include <gtest/gtest.h>

#include <string>

#include "core/config.h"
#include "expect_usage_error.h"
#include "model/param_table.h"
#include "optim/optimizer.h"

namespace {

using eco::Config;

Config parse(const std::string& model, const std::string& extra = "") {
  return eco::parse_config("data: {source: synthetic}\ntrain: {max_steps: 10}\nmodel: " + model +
                               "\n" + extra,
                           "cfg.yaml");
}

void expect_model_error(const std::string& model, std::initializer_list<std::string> parts) {
  expect_usage_error([&] { parse(model); }, parts);
}

TEST(Gemma3Config, FamilySetsGemmaStructureAndDefaults) {
  const Config c = parse("{family: gemma3, d_model: 64, n_head: 4}");
  const eco::ModelConfig& m = c.model;
  EXPECT_TRUE(m.post_norms && m.qk_norm && m.norm_unit_offset && m.scale_embeddings);
  EXPECT_EQ(m.mlp, eco::MlpKind::Geglu);
  EXPECT_EQ(m.mlp_hidden, 6 * 64);
  EXPECT_TRUE(m.tie_embeddings);
  EXPECT_EQ(m.rope_theta, 1e6f);
  EXPECT_EQ(m.rope_local_theta, 1e4f);
  EXPECT_EQ(m.sliding_window, 512);
  EXPECT_EQ(m.sliding_window_pattern, 6);
  for (int l = 0; l < 12; ++l) EXPECT_EQ(m.layer_is_local(l), (l + 1) % 6 != 0) << l;
  EXPECT_EQ(m.kv_heads(), 4);
  EXPECT_EQ(m.head_dim(), 16);
  EXPECT_EQ(m.query_scalar(), 16.f);
}

TEST(Gemma3Config, OneBillionShapeCountsOneBillionParameters) {
  const Config c = parse(
      "{family: gemma3, n_layer: 26, n_head: 4, n_kv_head: 1, head_dim: 256, d_model: 1152, "
      "mlp_hidden: 6912, vocab_size: 262144, seq_len: 512}");
  EXPECT_EQ(c.model.qkv_rows(), 6 * 256);
  EXPECT_EQ(eco::build_param_table(c.model).total, 999885952);
}

TEST(Gemma3Config, NHeadNotDivisibleByNKvHeadNamesTheKey) {
  expect_model_error("{family: gemma3, d_model: 64, n_head: 4, n_kv_head: 3}",
                     {"cfg.yaml", "model.n_kv_head", "divisible"});
  expect_model_error("{family: llama, d_model: 64, n_head: 4, n_kv_head: 8}",
                     {"model.n_kv_head"});
}

TEST(Gemma3Config, HeadDimFreesDModelFromNHeadAndMustBeEvenForRope) {
  EXPECT_EQ(parse("{family: llama, d_model: 60, n_head: 8, head_dim: 16}").model.attn_width(),
            128);
  expect_model_error("{family: llama, d_model: 60, n_head: 8}", {"model.d_model", "head_dim"});
  expect_model_error("{family: gemma3, d_model: 64, n_head: 4, head_dim: 7}",
                     {"model.head_dim", "even"});
}

TEST(Gemma3Config, BadWindowKeysNameTheKey) {
  expect_model_error("{family: gemma3, sliding_window: -1}", {"model.sliding_window"});
  expect_model_error("{family: gemma3, sliding_window_pattern: 0}",
                     {"model.sliding_window_pattern"});
  expect_model_error("{family: gemma3, query_pre_attn_scalar: -2}",
                     {"model.query_pre_attn_scalar"});
}

TEST(Gemma3Config, CudaRunsTheFamilyButRefusesHeadSizesAbove256) {
  // The CUDA backend has the family's kernels: gemma3, grouped-query attention and an own
  // head_dim up to 256 (Gemma 3 1B's) pass; 288 names the key and the limit.
  EXPECT_NO_THROW(eco::require_device_runs_model(parse("{family: gemma3}", "device: cuda\n")));
  EXPECT_NO_THROW(eco::require_device_runs_model(
      parse("{family: gemma3, d_model: 1152, n_head: 4, n_kv_head: 1, head_dim: 256}",
            "device: cuda\n")));
  EXPECT_NO_THROW(eco::require_device_runs_model(
      parse("{family: llama, n_head: 4, n_kv_head: 2}", "device: cuda\n")));
  EXPECT_NO_THROW(eco::require_device_runs_model(parse("{family: llama}", "device: cuda\n")));
  const Config big = parse("{family: gemma3, d_model: 1152, n_head: 4, head_dim: 288}",
                           "device: cuda\n");
  expect_usage_error([&] { eco::require_device_runs_model(big); },
                     {"model.head_dim", "288", "256"});
  const Config wide = parse("{family: llama, d_model: 1152, n_head: 2}", "device: cuda\n");
  expect_usage_error([&] { eco::require_device_runs_model(wide); }, {"model.d_model", "576"});
  EXPECT_NO_THROW(eco::require_device_runs_model(parse("{family: llama, d_model: 1152, n_head: 2}",
                                                       "device: cpu\n")));
}

// Existing llama / gpt2 configs resolve as before: no attention key in the YAML or the
// fingerprint (checkpoints keep resuming).
TEST(Gemma3Config, OtherFamiliesKeepTheirResolvedYamlAndFingerprint) {
  for (const char* family : {"gpt2", "llama"}) {
    const Config c = parse(std::string("{family: ") + family + "}");
    const std::string yaml = eco::to_yaml(c), fp = eco::model_fingerprint(c);
    for (const char* key : {"n_kv_head", "head_dim", "sliding_window", "query_pre_attn_scalar",
                            "rope_local_theta", "warmup_start_lr"}) {
      EXPECT_EQ(yaml.find(key), std::string::npos) << family << " " << key;
      EXPECT_EQ(fp.find(key), std::string::npos) << family << " " << key;
    }
  }
  const Config g = parse("{family: gemma3}");
  EXPECT_NE(eco::model_fingerprint(g).find("n_kv_head=4"), std::string::npos);
  // The resolved YAML reads back to the same config.
  const Config again = eco::parse_config(eco::to_yaml(g), "resolved.yaml");
  EXPECT_EQ(eco::model_fingerprint(again), eco::model_fingerprint(g));
}

TEST(Gemma3Config, WarmupStartLrAboveLrNamesTheKey) {
  expect_usage_error([&] { parse("{family: gemma3}", "optim: {lr: 1.0e-4, warmup_start_lr: 1.0e-3}\n"); },
                     {"optim.warmup_start_lr"});
}

// The paper's Gemma recipe: a linear warmup from 1e-6 (not 0) to 1e-4.
TEST(Gemma3Config, WarmupRisesLinearlyFromWarmupStartLr) {
  eco::OptimConfig o;
  o.lr = 1e-4;
  o.warmup_start_lr = 1e-6;
  EXPECT_DOUBLE_EQ(eco::lr_at(o, 0, 10, 100), 1e-6 + (1e-4 - 1e-6) / 10);
  EXPECT_DOUBLE_EQ(eco::lr_at(o, 9, 10, 100), 1e-4);
  o.warmup_start_lr = 0;
  EXPECT_EQ(eco::lr_at(o, 3, 10, 100), 1e-4 * 4 / 10);  // the plain warmup, bit for bit
}

}  // namespace
