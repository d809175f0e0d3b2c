// The config key table (core/config_table.h): the resolved YAML and the fingerprint it generates
// are the text checkpoints carry (pinned below as the loader wrote them), every row survives the
// resolved YAML, and the unknown-key error names every row of its section.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/config_table.h"
#include "base/error.h"

using eco::Config;
using eco::parse_config;
namespace table = eco::config_table;

namespace {

constexpr const char* kDefaultsYaml = "data: {source: synthetic}\ntrain: {max_steps: 10}\n";

// Every optional key set, so every row of every table is written.
constexpr const char* kEveryKeyYaml = R"(
model: {family: gemma3, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 64, vocab_size: 300,
  seq_len: 32, sliding_window: 16, rope_local_theta: 5000.5, query_pre_attn_scalar: 24,
  init_from: /tmp/hf,
  moe: {n_experts: 4, top_k: 2, expert_hidden: 32, n_shared_experts: 1, router: sigmoid_bias,
        bias_update_rate: 0.002, capacity_factor: 1.25, first_dense: 1}}
data: {source: synthetic}
optim: {name: sgdm, lr: 0.003, warmup_start_lr: 1.0e-5, state_dtype: bf16, schedule: constant}
train: {max_steps: 10, spike_factor: 3.5, spike_window: 7}
precision: {treatment: fp8-eco-sr, quantize: experts}
parallel: {dp: 2, ep: 2, zero: 1, timeout_s: 30, phase_timeout_s: 7200, ep_row_factor: 1.5,
           overlap: true}
)";

Config parse(const std::string& yaml) { return parse_config(yaml, "cfg.yaml"); }

std::string usage_message(const std::string& yaml) {
  try {
    parse(yaml);
  } catch (const eco::Error& e) {
    EXPECT_EQ(e.kind(), eco::ErrorKind::Usage);
    return e.what();
  }
  ADD_FAILURE() << "accepted:\n" << yaml;
  return "";
}

// Each row of the section, written for `a`, has the same text in `b`.
template <class S>
void expect_rows_equal(const table::Section<S>& section, const S& a, const S& b) {
  for (const table::Key<S>& k : section.keys) {
    EXPECT_TRUE(k.written(a)) << section.name << "." << k.name << " is not written";
    if (k.text) {  // model.moe has none: its own section's rows are compared
      EXPECT_EQ(k.text(b), k.text(a)) << section.name << "." << k.name;
    }
  }
}

// The names of the section's rows as the unknown-key error lists them (sorted, comma-separated).
template <class S>
std::string known_keys(const table::Section<S>& section) {
  std::vector<std::string> names;
  for (const table::Key<S>& k : section.keys) names.push_back(k.name);
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

TEST(ConfigTable, ResolvedYamlOfTheDefaultsIsTheCheckpointedText) {
  EXPECT_EQ(eco::to_yaml(parse(kDefaultsYaml)), R"(model:
  family: gpt2
  n_layer: 4
  n_head: 4
  d_model: 128
  mlp_hidden: 512
  vocab_size: 256
  seq_len: 64
  max_seq_len: 64
  tie_embeddings: true
  rope_theta: 10000
  norm_eps: 9.99999975e-06
data:
  source: synthetic
  train: ""
  val: ""
  decode_table: ""
  shuffle: true
optim:
  name: adamw
  lr: 0.00029999999999999997
  beta1: 0.90000000000000002
  beta2: 0.94999999999999996
  eps: 1e-08
  weight_decay: 0.10000000000000001
  grad_clip: 1
  warmup_steps: 0
  warmup_frac: 0
  schedule: cosine
  final_lr_frac: 0.10000000000000001
  state_dtype: fp32
train:
  batch_size: 8
  grad_accum: 1
  max_steps: 10
  max_tokens: 0
  log_interval: 10
  eval_interval: 0
  eval_batches: 20
  checkpoint_interval: 0
  keep_checkpoints: 2
  sample_interval: 0
  sample_tokens: 200
  sample_temperature: 1
  seed: 1337
  out_dir: runs/default
  threads: 0
  profile: false
precision:
  treatment: fp32
device: cpu
)");
}

TEST(ConfigTable, ResolvedYamlWritesEveryOptionalKeyInTableOrder) {
  EXPECT_EQ(eco::to_yaml(parse(kEveryKeyYaml)), R"(model:
  family: gemma3
  n_layer: 2
  n_head: 4
  d_model: 64
  mlp_hidden: 384
  vocab_size: 300
  seq_len: 32
  max_seq_len: 32
  tie_embeddings: true
  rope_theta: 1000000
  norm_eps: 9.99999997e-07
  n_kv_head: 2
  head_dim: 16
  sliding_window: 16
  sliding_window_pattern: 6
  rope_local_theta: 5000.5
  query_pre_attn_scalar: 24
  moe:
    n_experts: 4
    top_k: 2
    expert_hidden: 32
    n_shared_experts: 1
    expert_act: geglu
    every: 1
    first_dense: 1
    router: sigmoid_bias
    norm_topk: false
    aux_loss_coef: 0.01
    z_loss_coef: 0.001
    capacity_factor: 1.25
    bias_update_rate: 0.002
  init_from: /tmp/hf
data:
  source: synthetic
  train: ""
  val: ""
  decode_table: ""
  shuffle: true
optim:
  name: sgdm
  lr: 0.0030000000000000001
  beta1: 0.90000000000000002
  beta2: 0.94999999999999996
  eps: 1e-08
  weight_decay: 0.10000000000000001
  grad_clip: 1
  warmup_steps: 0
  warmup_frac: 0
  schedule: constant
  final_lr_frac: 0.10000000000000001
  warmup_start_lr: 1.0000000000000001e-05
  state_dtype: bf16
train:
  batch_size: 8
  grad_accum: 1
  max_steps: 10
  max_tokens: 0
  log_interval: 10
  eval_interval: 0
  eval_batches: 20
  checkpoint_interval: 0
  keep_checkpoints: 2
  sample_interval: 0
  sample_tokens: 200
  sample_temperature: 1
  seed: 1337
  out_dir: runs/default
  threads: 0
  profile: false
  spike_factor: 3.5
  spike_window: 7
precision:
  treatment: fp8-eco-sr
  quantize: experts
parallel:
  dp: 2
  ep: 2
  zero: 1
  timeout_s: 30
  phase_timeout_s: 7200
  ep_row_factor: 1.5
  overlap: true
device: cpu
)");
}

TEST(ConfigTable, FingerprintOfTheDefaultsIsTheCheckpointedText) {
  EXPECT_EQ(eco::model_fingerprint(parse(kDefaultsYaml)),
      "family=gpt2 n_layer=4 n_head=4 d_model=128 mlp_hidden=512 vocab_size=256 "
      "max_seq_len=64 tie_embeddings=true treatment=fp32 optimizer=adamw state_dtype=fp32");
}

TEST(ConfigTable, FingerprintAppendsTheWrittenOptionalShapeKeysAfterTheOthers) {
  EXPECT_EQ(eco::model_fingerprint(parse(kEveryKeyYaml)),
            "family=gemma3 n_layer=2 n_head=4 d_model=64 mlp_hidden=384 vocab_size=300 "
            "max_seq_len=32 tie_embeddings=true treatment=fp8-eco-sr optimizer=sgdm "
            "state_dtype=bf16 quantize=experts moe(n_experts=4 top_k=2 expert_hidden=32 "
            "n_shared=1 act=geglu every=1 first_dense=1 router=sigmoid_bias norm_topk=false) "
            "n_kv_head=2 head_dim=16 sliding_window=16 sliding_window_pattern=6 "
            "query_pre_attn_scalar=24");
}

TEST(ConfigTable, TrajectoryKeysListTheAlwaysWrittenKeysThenTheOptionalOnesThenTheLength) {
  const std::vector<std::string> keys = eco::trajectory_keys(parse(kDefaultsYaml));
  std::string joined;
  for (const std::string& k : keys) joined += (joined.empty() ? "" : " ") + k;
  EXPECT_EQ(joined,
      "model.seq_len model.rope_theta model.norm_eps data.source data.shuffle optim.lr "
      "optim.beta1 optim.beta2 optim.eps optim.weight_decay optim.grad_clip "
      "optim.warmup_steps optim.warmup_frac optim.schedule optim.final_lr_frac "
      "train.batch_size train.seed optim.warmup_start_lr model.rope_local_theta "
      "train.max_steps train.max_tokens");
  // A constant schedule without a warmup fraction does not depend on the run's length.
  EXPECT_EQ(eco::trajectory_keys(parse(kEveryKeyYaml)).size(), keys.size() - 2);
}

TEST(ConfigTable, EveryRowRoundTripsThroughTheResolvedYaml) {
  const Config a = parse(kEveryKeyYaml);
  const Config b = parse_config(eco::to_yaml(a), "resolved.yaml");
  expect_rows_equal(table::model_section(), a.model, b.model);
  expect_rows_equal(table::moe_section(), a.model.moe, b.model.moe);
  expect_rows_equal(table::data_section(), a.data, b.data);
  expect_rows_equal(table::optim_section(), a.optim, b.optim);
  expect_rows_equal(table::train_section(), a.train, b.train);
  expect_rows_equal(table::precision_section(), a.precision, b.precision);
  expect_rows_equal(table::parallel_section(), a.parallel, b.parallel);
  EXPECT_EQ(eco::to_yaml(b), eco::to_yaml(a));
  EXPECT_EQ(eco::model_fingerprint(b), eco::model_fingerprint(a));
}

TEST(ConfigTable, UnknownKeyErrorNamesEveryRowOfItsSection) {
  const auto expect_known = [](const std::string& yaml, const std::string& section,
                               const std::string& known) {
    const std::string msg = usage_message(yaml);
    EXPECT_NE(msg.find("unknown key '" + section + ".bogus' (known keys in '" + section +
                       "': " + known + ")"),
              std::string::npos)
        << msg;
  };
  const std::string base = kDefaultsYaml;
  expect_known("model: {bogus: 1}\n" + base, "model", known_keys(table::model_section()));
  expect_known("model: {moe: {n_experts: 4, expert_hidden: 8, bogus: 1}}\n" + base, "model.moe",
               known_keys(table::moe_section()));
  expect_known("data: {source: synthetic, bogus: 1}\ntrain: {max_steps: 10}\n", "data",
               known_keys(table::data_section()));
  expect_known("optim: {bogus: 1}\n" + base, "optim", known_keys(table::optim_section()));
  expect_known("data: {source: synthetic}\ntrain: {max_steps: 10, bogus: 1}\n", "train",
               known_keys(table::train_section()));
  expect_known("precision: {bogus: 1}\n" + base, "precision",
               known_keys(table::precision_section()));
  expect_known("parallel: {bogus: 1}\n" + base, "parallel", known_keys(table::parallel_section()));
}

TEST(ConfigTable, FamilyDefaultsOfGpt2AreTheStructDefaults) {
  // The rows' by_family values for gpt2 (the default family) agree with the struct's initializers,
  // which code that builds a ModelConfig by hand gets.
  const eco::ModelConfig read = parse(kDefaultsYaml).model, built;
  EXPECT_EQ(read.tie_embeddings, built.tie_embeddings);
  EXPECT_EQ(read.rope_theta, built.rope_theta);
  EXPECT_EQ(read.norm_eps, built.norm_eps);
  EXPECT_EQ(read.sliding_window, built.sliding_window);
  const eco::ModelConfig llama =
      parse(std::string("model: {family: llama}\n") + kDefaultsYaml).model;
  EXPECT_FALSE(llama.tie_embeddings);
  EXPECT_EQ(llama.rope_theta, built.rope_theta);
  const eco::ModelConfig gemma3 =
      parse(std::string("model: {family: gemma3, d_model: 64}\n") + kDefaultsYaml).model;
  EXPECT_TRUE(gemma3.tie_embeddings);
  EXPECT_EQ(gemma3.rope_theta, 1e6f);
  EXPECT_EQ(gemma3.norm_eps, 1e-6f);
  EXPECT_EQ(gemma3.sliding_window, 512);
}
