// The run configuration: defaults, `--set` overrides, every usage error (kind Usage, exit code 2,
// naming the origin and the key), the resolved-YAML round trip, fingerprint and step counts.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/config.h"
#include "base/error.h"
#include "expect_usage_error.h"

using eco::Config;
using eco::parse_config;

namespace {

constexpr const char* kOrigin = "cfg.yaml";

// The smallest valid config besides the family defaults: synthetic data (no shard path needed)
// and a step budget. Tests append or override what they are about.
std::string base_yaml(const std::string& extra = "") {
  return "data: {source: synthetic}\ntrain: {max_steps: 10}\n" + extra;
}

Config parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return parse_config(yaml, kOrigin, overrides);
}

// A config file error must name the file and the key.
void expect_config_error(const std::string& yaml, std::initializer_list<std::string> parts,
                         const std::vector<std::string>& overrides = {}) {
  expect_usage_error([&] { parse(yaml, overrides); }, parts);
}

}  // namespace

// ---- defaults ---------------------------------------------------------------------------------

TEST(Config, Gpt2MlpHiddenDefaultsToFourTimesDModel) {
  const Config c = parse(base_yaml("model: {family: gpt2, d_model: 96, n_head: 4}\n"));
  EXPECT_EQ(c.model.mlp_hidden, 4 * 96);
}

TEST(Config, LlamaMlpHiddenDefaultsToEightThirdsDModelRoundedUpTo256) {
  // Independent of the implementation's integer arithmetic: ceil((8 d / 3) / 256) * 256.
  for (int d : {128, 256, 768, 1024, 4096}) {
    const Config c = parse(base_yaml(), {"model.family=llama", "model.n_head=4",
                                         "model.d_model=" + std::to_string(d)});
    const int expected = int(std::ceil(8.0 * d / 3.0 / 256.0)) * 256;
    EXPECT_EQ(c.model.mlp_hidden, expected) << "d_model " << d;
  }
  // Llama 7B's published figure.
  EXPECT_EQ(parse(base_yaml("model: {family: llama, d_model: 4096, n_head: 32}\n")).model.mlp_hidden,
            11008);
}

TEST(Config, ExplicitMlpHiddenIsKept) {
  const Config c = parse(base_yaml("model: {family: llama, mlp_hidden: 100}\n"));
  EXPECT_EQ(c.model.mlp_hidden, 100);
}

TEST(Config, LlamaIsUntiedAndGpt2IsTiedByDefault) {
  EXPECT_FALSE(parse(base_yaml("model: {family: llama}\n")).model.tie_embeddings);
  EXPECT_TRUE(parse(base_yaml("model: {family: gpt2}\n")).model.tie_embeddings);
  EXPECT_TRUE(parse(base_yaml()).model.tie_embeddings) << "gpt2 is the default family";
}

TEST(Config, ExplicitTieEmbeddingsOverridesTheFamilyDefault) {
  EXPECT_TRUE(parse(base_yaml("model: {family: llama, tie_embeddings: true}\n")).model.tie_embeddings);
  EXPECT_FALSE(parse(base_yaml("model: {family: gpt2, tie_embeddings: false}\n")).model.tie_embeddings);
}

TEST(Config, MaxSeqLenDefaultsToSeqLen) {
  EXPECT_EQ(parse(base_yaml("model: {seq_len: 48}\n")).model.max_seq_len, 48);
  EXPECT_EQ(parse(base_yaml("model: {seq_len: 48, max_seq_len: 96}\n")).model.max_seq_len, 96);
}

TEST(Config, EmptyTextNeedsOnlyDataAndStepBudget) {
  const Config c = parse(base_yaml());
  EXPECT_EQ(c.model.family, eco::ModelFamily::Gpt2);
  EXPECT_EQ(c.device, eco::Device::Cpu);
  EXPECT_EQ(c.precision.treatment.name, "fp32");
  EXPECT_FALSE(c.precision.treatment.quantized);
  EXPECT_EQ(c.source_path, kOrigin);
}

// ---- --set overrides --------------------------------------------------------------------------

TEST(ConfigOverride, NestedKeysTakeYamlTypedValues) {
  const Config c = parse("data: {source: synthetic, shuffle: true}\ntrain: {max_steps: 10}\n"
                         "optim: {lr: 1.0e-3}\n",
                         {"optim.lr=3e-4", "train.grad_accum=4", "data.shuffle=false"});
  EXPECT_EQ(c.optim.lr, 3e-4);  // exact: both sides are the double nearest to 3e-4
  EXPECT_EQ(c.train.grad_accum, 4);
  EXPECT_FALSE(c.data.shuffle);
}

TEST(ConfigOverride, LaterOverrideOfTheSameKeyWins) {
  const Config c = parse(base_yaml(), {"train.batch_size=3", "train.batch_size=5"});
  EXPECT_EQ(c.train.batch_size, 5);
}

TEST(ConfigOverride, CreatesAMissingSection) {
  const Config c = parse("data: {source: synthetic}\n", {"train.max_steps=7", "optim.warmup_steps=2"});
  EXPECT_EQ(c.train.max_steps, 7);
  EXPECT_EQ(c.optim.warmup_steps, 2);
}

TEST(ConfigOverride, FillsASectionThatIsPresentButEmpty) {
  const Config c = parse("data: {source: synthetic}\ntrain:\n", {"train.max_steps=7"});
  EXPECT_EQ(c.train.max_steps, 7);
}

TEST(ConfigOverride, SetsTheTopLevelDevice) {
  const Config c = parse(base_yaml("device: cuda\n"), {"device=cpu"});
  EXPECT_EQ(c.device, eco::Device::Cpu);
}

TEST(ConfigOverride, WrongTypeIsReportedForTheKey) {
  expect_config_error(base_yaml(), {kOrigin, "train.grad_accum", "integer", "4.5"},
                      {"train.grad_accum=4.5"});
}

TEST(ConfigOverride, UnknownKeyIsReportedAsSectionDotKey) {
  expect_config_error(base_yaml(), {kOrigin, "optim.lrr"}, {"optim.lrr=1"});
}

TEST(ConfigOverride, WithoutEqualsSignIsRefused) {
  expect_usage_error([] { parse(base_yaml(), {"optim.lr"}); }, {"--set", "optim.lr", "KEY=VALUE"});
}

TEST(ConfigOverride, WithEmptyKeyIsRefused) {
  expect_usage_error([] { parse(base_yaml(), {"=3"}); }, {"--set", "KEY=VALUE"});
}

TEST(ConfigOverride, WithEmptyKeyComponentIsRefused) {
  expect_usage_error([] { parse(base_yaml(), {"optim..lr=3"}); }, {"--set", "optim..lr", "empty"});
}

TEST(ConfigOverride, IntoAScalarIsRefused) {
  // model.n_layer is a scalar in the file, so it cannot hold a key.
  expect_usage_error([] { parse(base_yaml("model: {n_layer: 2}\n"), {"model.n_layer.x=1"}); },
                     {"--set", "model.n_layer.x=1", "n_layer", "not a section"});
}

TEST(ConfigOverride, IntoAScalarThatIsOnlyADefaultIsRefused) {
  // Not in the file: the override builds a mapping there, which the type check then refuses.
  expect_config_error(base_yaml(), {kOrigin, "model.n_layer", "integer", "mapping"},
                      {"model.n_layer.x=1"});
}

TEST(ConfigOverride, InvalidYamlValueIsRefused) {
  expect_usage_error([] { parse(base_yaml(), {"optim.lr=[1,"}); },
                     {"--set", "optim.lr=[1,", "not valid YAML"});
}

TEST(ConfigOverride, WithEmptyValueIsRefused) {
  expect_usage_error([] { parse(base_yaml(), {"optim.lr="}); }, {"--set", "optim.lr="});
}

// ---- errors -----------------------------------------------------------------------------------

TEST(ConfigError, MalformedYamlNamesOriginAndLine) {
  // Line 3 holds the unclosed flow mapping; yaml-cpp reports where it notices, which is at or
  // after the opening brace, so accept the line of the brace or the next one.
  try {
    parse("data: {source: synthetic}\ntrain: {max_steps: 10}\nmodel: {n_layer: 2\n");
    ADD_FAILURE() << "malformed YAML was accepted";
  } catch (const eco::Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.kind(), eco::ErrorKind::Usage) << msg;
    EXPECT_NE(msg.find("malformed YAML"), std::string::npos) << msg;
    EXPECT_TRUE(msg.rfind("cfg.yaml:3:", 0) == 0 || msg.rfind("cfg.yaml:4:", 0) == 0) << msg;
  }
}

TEST(ConfigError, MalformedYamlReportsTheLineOfABadIndent) {
  expect_config_error("model:\n  n_layer: 2\n n_head: 2\n", {"cfg.yaml:3:", "malformed YAML"});
}

TEST(ConfigError, DuplicateKeyIsRefused) {
  expect_config_error(base_yaml("model: {n_layer: 2, n_layer: 3}\n"), {kOrigin, "model.n_layer"});
}

TEST(ConfigError, DuplicateSectionIsRefused) {
  expect_config_error(base_yaml("optim: {lr: 1.0e-3}\noptim: {lr: 2.0e-3}\n"), {kOrigin, "optim"});
}

TEST(ConfigError, TopLevelMustBeAMapping) {
  expect_config_error("- model\n- data\n", {kOrigin, "top level", "mapping"});
}

TEST(ConfigError, UnknownTopLevelKey) {
  expect_config_error(base_yaml("optimizer: {lr: 1}\n"),
                      {kOrigin, "unknown top-level key", "optimizer",
                       "precision, parallel, device"});
}

TEST(ConfigError, UnknownNestedKeyNamesSectionDotKeyAndListsKnownKeys) {
  expect_config_error(base_yaml("model: {n_layers: 2}\n"),
                      {kOrigin, "unknown key 'model.n_layers'", "n_layer"});
}

TEST(ConfigError, SectionThatIsNotAMapping) {
  expect_config_error(base_yaml("model: 3\n"), {kOrigin, "'model'", "mapping"});
}

TEST(ConfigError, WrongTypeNamesKeyExpectedTypeAndValue) {
  expect_config_error(base_yaml("model: {n_layer: two}\n"),
                      {kOrigin, "model.n_layer", "integer", "'two'"});
}

TEST(ConfigError, FractionWhereIntegerExpected) {
  expect_config_error(base_yaml("model: {n_layer: 2.5}\n"), {kOrigin, "model.n_layer", "integer"});
}

TEST(ConfigError, WordWhereBooleanExpected) {
  expect_config_error("data: {source: synthetic, shuffle: maybe}\ntrain: {max_steps: 10}\n",
                      {kOrigin, "data.shuffle", "true or false"});
}

TEST(ConfigError, WordWhereNumberExpected) {
  expect_config_error(base_yaml("optim: {lr: fast}\n"), {kOrigin, "optim.lr", "number", "fast"});
}

TEST(ConfigError, NegativeSeedIsRefused) {
  expect_config_error("data: {source: synthetic}\ntrain: {max_steps: 10, seed: -1}\n",
                      {kOrigin, "train.seed", "integer"});
}

TEST(ConfigError, ListWhereScalarExpected) {
  expect_config_error(base_yaml("model: {n_head: [2, 4]}\n"), {kOrigin, "model.n_head", "a list"});
}

TEST(ConfigError, DModelNotDivisibleByNHead) {
  expect_config_error(base_yaml("model: {d_model: 100, n_head: 3}\n"),
                      {kOrigin, "model.d_model", "not divisible", "100", "3"});
}

TEST(ConfigError, OddHeadDimensionForLlama) {
  // d_model 36 / 12 heads = head dim 3: RoPE rotates pairs of dimensions.
  expect_config_error(base_yaml("model: {family: llama, d_model: 36, n_head: 12}\n"),
                      {kOrigin, "model.d_model", "even head dimension", "3"});
}

TEST(ConfigError, OddHeadDimensionIsFineForGpt2) {
  EXPECT_EQ(parse(base_yaml("model: {family: gpt2, d_model: 36, n_head: 12}\n")).model.head_dim(), 3);
}

TEST(ConfigError, SeqLenBeyondMaxSeqLen) {
  expect_config_error(base_yaml("model: {seq_len: 128, max_seq_len: 64}\n"),
                      {kOrigin, "model.seq_len", "128", "max_seq_len 64"});
}

TEST(ConfigError, BothMaxStepsAndMaxTokens) {
  expect_config_error("data: {source: synthetic}\ntrain: {max_steps: 10, max_tokens: 1000}\n",
                      {kOrigin, "train.max_tokens", "not both"});
}

TEST(ConfigError, NeitherMaxStepsNorMaxTokens) {
  expect_config_error("data: {source: synthetic}\n", {kOrigin, "train.max_steps", "max_tokens"});
}

TEST(ConfigError, UnknownFamily) {
  expect_config_error(base_yaml("model: {family: mamba}\n"), {kOrigin, "model.family", "'mamba'"});
}

TEST(ConfigError, UnknownSchedule) {
  expect_config_error(base_yaml("optim: {schedule: step}\n"), {kOrigin, "optim.schedule", "'step'"});
}

TEST(ConfigError, UnknownDevice) {
  expect_config_error(base_yaml("device: tpu\n"), {kOrigin, "device", "'tpu'"});
}

TEST(ConfigError, UnknownDataSource) {
  expect_config_error("data: {source: web}\ntrain: {max_steps: 10}\n",
                      {kOrigin, "data.source", "'web'"});
}

TEST(ConfigError, ShardSourceNeedsDataTrain) {
  expect_config_error("data: {source: shards}\ntrain: {max_steps: 10}\n", {kOrigin, "data.train"});
  expect_config_error("train: {max_steps: 10}\n", {kOrigin, "data.train"});  // shards is the default
}

// The config accepts device: cuda; whether this build and machine can run it is the trainer's
// question (test_device.cpp).
TEST(Config, CudaDeviceIsAccepted) {
  EXPECT_EQ(parse(base_yaml("device: cuda\n")).device, eco::Device::Cuda);
}

// Every choice is parsed once into its enum (the family also into its block structure) and
// written back by the same name.
TEST(Config, ChoicesAreParsedIntoEnumsAndWrittenBackByName) {
  const Config c = parse(base_yaml("model: {family: llama, n_head: 4, d_model: 128}\n"
                                   "optim: {name: sgdm, schedule: linear, state_dtype: bf16}\n"
                                   "precision: {treatment: int4-eco-sr}\n"));
  EXPECT_EQ(c.model.family, eco::ModelFamily::Llama);
  EXPECT_EQ(c.model.norm, eco::NormKind::RmsNorm);
  EXPECT_EQ(c.model.mlp, eco::MlpKind::Swiglu);
  EXPECT_EQ(c.model.positions, eco::PositionKind::Rope);
  EXPECT_FALSE(c.model.linear_bias);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_EQ(c.optim.name, eco::OptimizerKind::Sgdm);
  EXPECT_EQ(c.optim.schedule, eco::LrSchedule::Linear);
  EXPECT_EQ(c.optim.state_dtype, eco::StateDType::Bf16);
  EXPECT_EQ(c.data.source, eco::DataSource::Synthetic);
  const eco::Treatment& t = c.precision.treatment;
  EXPECT_TRUE(t.quantized);
  EXPECT_EQ(t.format, eco::QFormat::INT4);
  EXPECT_EQ(t.policy, eco::UpdatePolicy::Eco);
  EXPECT_EQ(t.rounding, eco::Rounding::SR);
  const std::string y = eco::to_yaml(c);
  for (const char* line : {"family: llama", "name: sgdm", "schedule: linear", "state_dtype: bf16",
                           "source: synthetic", "treatment: int4-eco-sr", "device: cpu"})
    EXPECT_NE(y.find(line), std::string::npos) << line << " in\n" << y;
  EXPECT_EQ(parse(y).precision.treatment.name, "int4-eco-sr");
  const std::string fp = eco::model_fingerprint(c);
  EXPECT_NE(fp.find("family=llama "), std::string::npos) << fp;
  EXPECT_NE(fp.find("treatment=int4-eco-sr optimizer=sgdm state_dtype=bf16"), std::string::npos)
      << fp;
  const Config g = parse(base_yaml());
  EXPECT_EQ(g.model.norm, eco::NormKind::LayerNorm);
  EXPECT_EQ(g.model.mlp, eco::MlpKind::Gelu);
  EXPECT_EQ(g.model.positions, eco::PositionKind::Learned);
  EXPECT_TRUE(g.model.linear_bias);
}

TEST(ConfigError, UnknownEnumValuesNameTheValidOnes) {
  expect_config_error(base_yaml("optim: {name: lion}\n"), {kOrigin, "optim.name", "'lion'",
                                                           "'adamw' or 'sgdm'"});
  expect_config_error(base_yaml("optim: {state_dtype: fp16}\n"),
                      {kOrigin, "optim.state_dtype", "'fp16'", "'fp32' or 'bf16'"});
  expect_config_error(base_yaml("optim: {schedule: step}\n"),
                      {kOrigin, "optim.schedule", "'cosine', 'linear' or 'constant'"});
}

TEST(ConfigError, DeviceOtherThanCpuOrCudaIsRefused) {
  expect_config_error(base_yaml("device: tpu\n"), {kOrigin, "device", "'tpu'"});
}

TEST(ConfigError, TreatmentOtherThanFp32IsRefused) {
  expect_config_error(base_yaml("precision: {treatment: eco_fp8}\n"),
                      {kOrigin, "precision.treatment", "'eco_fp8'", "fp32"});
}

TEST(ConfigError, LoadConfigNamesAMissingFile) {
  expect_usage_error([] { eco::load_config("/nonexistent/eco_cfg.yaml"); },
                     {"/nonexistent/eco_cfg.yaml", "cannot open"});
}

// ---- resolved YAML, fingerprint, step counts ---------------------------------------------------

TEST(Config, ToYamlRoundTripsEveryKey) {
  // Non-default values everywhere, including floats that need full precision and strings that
  // YAML would otherwise misread (a glob starting with '*', a colon, an empty string).
  const Config a = parse(
      "model: {family: llama, n_layer: 3, n_head: 6, d_model: 96, vocab_size: 1000, seq_len: 40,"
      " max_seq_len: 80, rope_theta: 500000.0, norm_eps: 1.0e-6}\n"
      "data: {source: shards, train: '*/train_*.bin', val: 'a: b', shuffle: false}\n"
      "optim: {lr: 3.0e-4, beta1: 0.8, beta2: 0.99, eps: 1.0e-10, weight_decay: 0.05,"
      " grad_clip: 0.5, warmup_frac: 0.1, schedule: linear, final_lr_frac: 0.033}\n"
      "train: {batch_size: 3, grad_accum: 2, max_tokens: 123456, log_interval: 5,"
      " eval_interval: 7, eval_batches: 9, checkpoint_interval: 11, keep_checkpoints: 4,"
      " sample_interval: 13, sample_tokens: 17, sample_temperature: 0.7,"
      " seed: 18446744073709551615, out_dir: runs/x y, threads: 2}\n");
  const std::string yaml = eco::to_yaml(a);
  const Config b = parse_config(yaml, "resolved.yaml");
  EXPECT_EQ(eco::to_yaml(b), yaml);
  // The text can agree while both lose precision, so compare the values that could.
  EXPECT_EQ(b.optim.lr, a.optim.lr);
  EXPECT_EQ(b.optim.final_lr_frac, a.optim.final_lr_frac);
  EXPECT_EQ(b.model.norm_eps, a.model.norm_eps);
  EXPECT_EQ(b.model.rope_theta, a.model.rope_theta);
  EXPECT_EQ(b.train.seed, a.train.seed);
  EXPECT_EQ(b.data.train, a.data.train);
  EXPECT_EQ(b.data.val, a.data.val);
  EXPECT_EQ(b.data.decode_table, "");
  EXPECT_EQ(b.train.out_dir, a.train.out_dir);
}

TEST(Config, ToYamlOfDefaultsRoundTrips) {
  const std::string yaml = eco::to_yaml(parse(base_yaml()));
  EXPECT_EQ(eco::to_yaml(parse_config(yaml, "resolved.yaml")), yaml);
}

TEST(Config, FingerprintChangesWithModelShapeButNotWithOptimizer) {
  const Config base = parse(base_yaml());
  EXPECT_NE(eco::model_fingerprint(parse(base_yaml(), {"model.d_model=256"})),
            eco::model_fingerprint(base));
  EXPECT_EQ(eco::model_fingerprint(parse(base_yaml(), {"optim.lr=1e-2"})),
            eco::model_fingerprint(base));
}

TEST(Config, TotalStepsFromMaxTokensRoundsUp) {
  // 4 x 2 x 16 = 128 tokens per step.
  const std::string yaml =
      "model: {seq_len: 16}\ndata: {source: synthetic}\ntrain: {batch_size: 4, grad_accum: 2}\n";
  EXPECT_EQ(parse(yaml, {"train.max_tokens=1000"}).total_steps(), 8);  // 7.8 -> 8
  EXPECT_EQ(parse(yaml, {"train.max_tokens=1024"}).total_steps(), 8);  // exact
  EXPECT_EQ(parse(yaml, {"train.max_tokens=1025"}).total_steps(), 9);
  EXPECT_EQ(parse(yaml, {"train.max_tokens=1"}).total_steps(), 1);
}

TEST(Config, TotalStepsIsMaxStepsWhenGiven) {
  EXPECT_EQ(parse(base_yaml()).total_steps(), 10);
}

TEST(Config, WarmupFracIsAFractionOfTotalSteps) {
  EXPECT_EQ(parse(base_yaml("optim: {warmup_frac: 0.25}\n"), {"train.max_steps=100"}).warmup_steps(), 25);
  EXPECT_EQ(parse(base_yaml("optim: {warmup_steps: 6}\n")).warmup_steps(), 6);
}

// ---- parallel ---------------------------------------------------------------------------------

TEST(ConfigParallel, DefaultsToOneProcessAndScalesTheGlobalBatchByDp) {
  const Config one = parse(base_yaml("model: {seq_len: 8}\n"));
  EXPECT_EQ(one.parallel.dp, 1);
  EXPECT_EQ(one.parallel.world(), 1);
  const Config four = parse(base_yaml("model: {seq_len: 8}\nparallel: {dp: 4}\n"));
  EXPECT_EQ(four.parallel.world(), 4);
  EXPECT_EQ(four.tokens_per_step(), 4 * one.tokens_per_step());
  // One process writes no parallel section (default runs' resolved configs stay as they were);
  // several do, and read back the same.
  EXPECT_EQ(eco::to_yaml(one).find("parallel"), std::string::npos);
  EXPECT_EQ(parse(eco::to_yaml(four)).parallel.dp, 4);
  const Config zero1 = parse(base_yaml("model: {seq_len: 8}\nparallel: {dp: 2, zero: 1}\n"));
  EXPECT_EQ(zero1.parallel.zero, 1);
  EXPECT_EQ(parse(eco::to_yaml(zero1)).parallel.zero, 1);
}

TEST(ConfigParallel, RefusesWhatIsNotBuiltOrOutOfRange) {
  expect_config_error(base_yaml("parallel: {dp: 0}\n"), {kOrigin, "parallel.dp", "[1, 65536]"});
  expect_config_error(base_yaml("parallel: {ep: 0}\n"), {kOrigin, "parallel.ep", "[1, 65536]"});
  expect_config_error(base_yaml("parallel: {zero: 2}\n"), {kOrigin, "parallel.zero", "0 or 1"});
  expect_config_error(base_yaml("parallel: {tp: 2}\n"), {kOrigin, "parallel.tp"});
  expect_config_error(base_yaml("parallel: {timeout_s: -1}\n"),
                      {kOrigin, "parallel.timeout_s", "0 (wait forever)"});
  expect_config_error(base_yaml("parallel: {timeout_s: .nan}\n"), {kOrigin, "parallel.timeout_s"});
  expect_config_error(base_yaml("parallel: {phase_timeout_s: -1}\n"),
                      {kOrigin, "parallel.phase_timeout_s", "0 (wait forever)"});
  expect_config_error(base_yaml("parallel: {phase_timeout_s: 1e8}\n"),
                      {kOrigin, "parallel.phase_timeout_s"});
  expect_config_error(base_yaml("parallel: {overlap: sometimes}\n"),
                      {kOrigin, "parallel.overlap", "true or false"});
}

// parallel.overlap: off by default; true survives the resolved config's round trip.
TEST(ConfigParallel, OverlapDefaultsToFalseAndRoundTrips) {
  EXPECT_FALSE(parse(base_yaml("")).parallel.overlap);
  const eco::Config on = parse(base_yaml("parallel: {dp: 2, overlap: true}\n"));
  EXPECT_TRUE(on.parallel.overlap);
  EXPECT_TRUE(parse(eco::to_yaml(on)).parallel.overlap);
  EXPECT_EQ(eco::to_yaml(parse(base_yaml(""))).find("overlap"), std::string::npos);
}

// parallel.ep splits the routed experts: a MoE model whose expert count it divides, with or
// without ZeRO-1; every rank of dp x ep reads its own micro-batch.
TEST(ConfigParallel, ExpertParallelismNeedsMoeExpertsItDividesOnTheCpu) {
  const std::string moe = "model: {moe: {n_experts: 4, top_k: 2, expert_hidden: 16}}\n";
  const Config ep2 = parse(base_yaml(moe + "parallel: {dp: 2, ep: 2}\n"));
  EXPECT_EQ(ep2.parallel.world(), 4);
  EXPECT_EQ(ep2.tokens_per_step(), 4 * parse(base_yaml(moe)).tokens_per_step());
  EXPECT_EQ(parse(eco::to_yaml(ep2)).parallel.ep, 2);
  expect_config_error(base_yaml("parallel: {ep: 2}\n"),
                      {kOrigin, "parallel.ep", "needs a MoE model", "model.moe.n_experts"});
  expect_config_error(base_yaml(moe + "parallel: {ep: 3}\n"),
                      {kOrigin, "parallel.ep", "must divide model.moe.n_experts (4)"});
  // ZeRO-1 composes with it (the dense parameters over the world, the experts over dp).
  const Config z1 = parse(base_yaml(moe + "parallel: {dp: 2, ep: 2, zero: 1}\n"));
  EXPECT_EQ(z1.parallel.zero, 1);
  EXPECT_EQ(parse(eco::to_yaml(z1)).parallel.zero, 1);
  EXPECT_EQ(parse(base_yaml(moe + "parallel: {ep: 2, ep_row_factor: 1.5}\n")).parallel.ep_row_factor,
            1.5);
  expect_config_error(base_yaml(moe + "parallel: {ep: 2, ep_row_factor: 3}\n"),
                      {kOrigin, "parallel.ep_row_factor", "[1, parallel.ep = 2]"});
  expect_config_error(base_yaml(moe + "parallel: {ep: 2, ep_row_factor: 0.5}\n"),
                      {kOrigin, "parallel.ep_row_factor"});
  // device: cuda parses (--plan shows its memory: e2e expert_parallel; training it: e2e
  // data_parallel_cuda).
  EXPECT_EQ(parse(base_yaml(moe + "parallel: {ep: 2}\ndevice: cuda\n")).parallel.ep, 2);
}

// ep 2 and dp 2 read the same micro-batches: a checkpoint of one resumes on the other.
TEST(ConfigParallel, ResumesExpertParallelRunsAtDataParallelWorlds) {
  const std::string moe = "model: {moe: {n_experts: 4, top_k: 2, expert_hidden: 16}}\n";
  const Config ep2 = parse(base_yaml(moe + "parallel: {ep: 2}\n"));
  const Config dp2 = parse(base_yaml(moe + "parallel: {dp: 2}\n"));
  EXPECT_TRUE(eco::trajectory_differences(eco::to_yaml(ep2), dp2).empty());
  const auto diffs = eco::trajectory_differences(eco::to_yaml(ep2), parse(base_yaml(moe)));
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_NE(diffs[0].find("1 x 2 x 1 = 2 in the checkpoint, 1 x 1 x 1 = 1 now"), std::string::npos)
      << diffs[0];
}

// A run resumes at another world size when the micro-batches of a step (dp x grad_accum) stay
// the same; otherwise the global batch would change, and that is refused by name.
TEST(ConfigParallel, ResumesAtAnotherWorldSizeWithTheSameMicroBatches) {
  const Config dp4 = parse(base_yaml("parallel: {dp: 4}\n"));
  const Config accum4 = parse(base_yaml(), {"train.grad_accum=4"});
  const Config dp2x2 = parse(base_yaml("parallel: {dp: 2}\n"), {"train.grad_accum=2"});
  EXPECT_TRUE(eco::trajectory_differences(eco::to_yaml(dp4), accum4).empty());
  EXPECT_TRUE(eco::trajectory_differences(eco::to_yaml(accum4), dp2x2).empty());
  const auto diffs = eco::trajectory_differences(eco::to_yaml(dp4), parse(base_yaml()));
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_NE(diffs[0].find("parallel.dp x parallel.ep x train.grad_accum (micro-batches a step): "
                          "4 x 1 x 1 = 4 in the checkpoint, 1 x 1 x 1 = 1 now"),
            std::string::npos)
      << diffs[0];
}

// ---- model.init_from ----------------------------------------------------------------------------
// Checked where it is read (check_init_from: a fresh start), not when the config loads, so that
// --plan and --resume work without the directory.
TEST(Config, InitFromMustBeACheckpointDirectoryWhenRead) {
  const Config missing = parse(base_yaml(), {"model.init_from=/no/such/dir"});
  EXPECT_EQ(missing.model.init_from, "/no/such/dir");
  const auto message = [](const Config& c) {
    try {
      eco::check_init_from(c);
    } catch (const eco::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string m1 = message(missing);
  for (const char* part : {"model.init_from", "/no/such/dir", "not a directory"})
    EXPECT_NE(m1.find(part), std::string::npos) << m1;
  const std::string m2 = message(parse(base_yaml(), {"model.init_from=/tmp"}));
  EXPECT_NE(m2.find("holds no config.json"), std::string::npos) << m2;
  EXPECT_EQ(message(parse(base_yaml(), {"model.init_from=" + std::string(ECO_FIXTURE_DIR) +
                                                         "/hf/gpt2"})),
            "(no error)");
  EXPECT_EQ(message(parse(base_yaml())), "(no error)");
  expect_config_error(base_yaml(), {"model.init_from"}, {"model.init_from=[1, 2]"});
}

TEST(Config, InitFromIsInTheResolvedConfigOnlyWhenSetAndNotInTheFingerprint) {
  const std::string dir = std::string(ECO_FIXTURE_DIR) + "/hf/gpt2";
  const Config set = parse(base_yaml(), {"model.init_from=" + dir});
  const Config unset = parse(base_yaml());
  EXPECT_EQ(set.model.init_from, dir);
  EXPECT_NE(eco::to_yaml(set).find("init_from: " + dir), std::string::npos);
  EXPECT_EQ(eco::to_yaml(unset).find("init_from"), std::string::npos);
  // A run resumed without it (or from another directory) continues the same training.
  EXPECT_EQ(eco::model_fingerprint(set), eco::model_fingerprint(unset));
  EXPECT_EQ(parse(eco::to_yaml(set)).model.init_from, dir);
}
