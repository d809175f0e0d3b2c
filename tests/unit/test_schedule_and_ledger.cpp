// The learning-rate schedule, the memory ledger, the parameter table's counts and flags, and the
// `--plan` report built from them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "core/config.h"
#include "base/memory_ledger.h"
#include "model/param_table.h"
#include "optim/optimizer.h"
#include "train/trainer.h"
#include "base/backend.h"
#include "model/transformer.h"
#include "train/plan_report.h"

using eco::MemCategory;
using eco::MemoryLedger;
using eco::OptimConfig;

namespace {

OptimConfig schedule(eco::LrSchedule name, double lr = 1e-3, double final_lr_frac = 0.1) {
  OptimConfig o;
  o.schedule = name;
  o.lr = lr;
  o.final_lr_frac = final_lr_frac;
  return o;
}

// The cosine schedule written out from its definition: after warmup, progress p runs from 0 at
// step `warmup` to 1 at the last step `total - 1`, and lr = lr * (lo + (1 - lo) (1 + cos(pi p)) / 2).
double cosine_reference(const OptimConfig& o, int64_t step, int64_t warmup, int64_t total) {
  const double p = double(step - warmup) / double(total - 1 - warmup);
  return o.lr * (o.final_lr_frac + (1.0 - o.final_lr_frac) * 0.5 * (1.0 + std::cos(M_PI * p)));
}

// Rounding error of a handful of double operations on values of order lr = 1e-3.
constexpr double kLrTol = 1e-12;

eco::ModelConfig gpt2_124m() {
  eco::ModelConfig m;
  m.set_family(eco::ModelFamily::Gpt2);
  m.n_layer = 12;
  m.n_head = 12;
  m.d_model = 768;
  m.mlp_hidden = 4 * 768;
  m.vocab_size = 50257;
  m.seq_len = 1024;
  m.max_seq_len = 1024;
  m.tie_embeddings = true;
  return m;
}

eco::ModelConfig small_llama(bool tied) {
  eco::ModelConfig m;
  m.set_family(eco::ModelFamily::Llama);
  m.n_layer = 3;
  m.n_head = 4;
  m.d_model = 256;
  m.mlp_hidden = 768;  // what the config derives for d_model 256: ceil(682.7 / 256) * 256
  m.vocab_size = 1000;
  m.seq_len = 64;
  m.max_seq_len = 64;
  m.tie_embeddings = tied;
  return m;
}

// Llama parameters by hand: embedding, per block RMSNorm gains (2C), fused qkv (3C x C), attention
// output (C x C), fused gate+up (2H x C), down (C x H); final gain; untied head (V x C).
int64_t llama_param_count(const eco::ModelConfig& m) {
  const int64_t C = m.d_model, V = m.vocab_size, H = m.mlp_hidden, L = m.n_layer;
  const int64_t block = 2 * C + 3 * C * C + C * C + 2 * H * C + C * H;
  return V * C + L * block + C + (m.tie_embeddings ? 0 : V * C);
}

}  // namespace

// ---- learning-rate schedule -------------------------------------------------------------------

TEST(Schedule, WarmupRisesLinearlyFromLrOverWarmupToLr) {
  const OptimConfig o = schedule(eco::LrSchedule::Cosine);
  const int64_t warmup = 10, total = 100;
  EXPECT_NEAR(eco::lr_at(o, 0, warmup, total), o.lr / warmup, kLrTol);
  for (int64_t s = 0; s < warmup; ++s)
    EXPECT_NEAR(eco::lr_at(o, s, warmup, total), o.lr * double(s + 1) / double(warmup), kLrTol)
        << "step " << s;
  EXPECT_NEAR(eco::lr_at(o, warmup - 1, warmup, total), o.lr, kLrTol);
}

TEST(Schedule, CosineStartsAtLrAfterWarmupAndEndsAtFinalFractionOnTheLastStep) {
  const OptimConfig o = schedule(eco::LrSchedule::Cosine, 1e-3, 0.1);
  const int64_t warmup = 10, total = 111;
  EXPECT_NEAR(eco::lr_at(o, warmup, warmup, total), o.lr, kLrTol);
  EXPECT_NEAR(eco::lr_at(o, total - 1, warmup, total), 0.1 * o.lr, kLrTol);
}

TEST(Schedule, CosineDecaysMonotonically) {
  const OptimConfig o = schedule(eco::LrSchedule::Cosine);
  const int64_t warmup = 10, total = 200;
  for (int64_t s = warmup; s + 1 < total; ++s)
    EXPECT_LE(eco::lr_at(o, s + 1, warmup, total), eco::lr_at(o, s, warmup, total)) << "step " << s;
}

TEST(Schedule, CosineAtHalfwayEqualsTheMidpointValue) {
  // total - 1 - warmup = 100 decay steps, so step warmup + 50 is exactly half way.
  const OptimConfig o = schedule(eco::LrSchedule::Cosine, 1e-3, 0.1);
  const int64_t warmup = 10, total = 111;
  const double mid = eco::lr_at(o, warmup + 50, warmup, total);
  EXPECT_NEAR(mid, cosine_reference(o, warmup + 50, warmup, total), kLrTol);
  EXPECT_NEAR(mid, o.lr * (0.1 + 0.9 * 0.5), kLrTol);  // cos(pi/2) = 0
}

TEST(Schedule, CosineMatchesItsFormulaAtEveryStep) {
  const OptimConfig o = schedule(eco::LrSchedule::Cosine, 6e-4, 0.0);
  const int64_t warmup = 5, total = 64;
  for (int64_t s = warmup; s < total; ++s)
    EXPECT_NEAR(eco::lr_at(o, s, warmup, total), cosine_reference(o, s, warmup, total), kLrTol)
        << "step " << s;
}

TEST(Schedule, LinearDecaysInEqualStepsToFinalFraction) {
  const OptimConfig o = schedule(eco::LrSchedule::Linear, 1e-3, 0.2);
  const int64_t warmup = 4, total = 25;  // 20 decay steps
  const double drop = o.lr * 0.8 / 20.0;
  for (int64_t s = warmup; s < total; ++s)
    EXPECT_NEAR(eco::lr_at(o, s, warmup, total), o.lr - drop * double(s - warmup), kLrTol)
        << "step " << s;
  EXPECT_NEAR(eco::lr_at(o, total - 1, warmup, total), 0.2 * o.lr, kLrTol);
}

TEST(Schedule, ConstantHoldsLrAfterWarmup) {
  const OptimConfig o = schedule(eco::LrSchedule::Constant);
  const int64_t warmup = 4, total = 50;
  EXPECT_NEAR(eco::lr_at(o, 0, warmup, total), o.lr / 4, kLrTol);
  for (int64_t s = warmup - 1; s < total; ++s)
    EXPECT_EQ(eco::lr_at(o, s, warmup, total), o.lr) << "step " << s;
}

TEST(Schedule, WithoutWarmupStartsAtLr) {
  for (const eco::LrSchedule name :
       {eco::LrSchedule::Cosine, eco::LrSchedule::Linear, eco::LrSchedule::Constant}) {
    const OptimConfig o = schedule(name);
    EXPECT_EQ(eco::lr_at(o, 0, 0, 100), o.lr) << eco::enum_name(name);
  }
  const OptimConfig o = schedule(eco::LrSchedule::Cosine, 1e-3, 0.1);
  EXPECT_NEAR(eco::lr_at(o, 99, 0, 100), 0.1 * o.lr, kLrTol);
  EXPECT_NEAR(eco::lr_at(o, 50, 0, 101), cosine_reference(o, 50, 0, 101), kLrTol);
}

TEST(Schedule, StaysAtFinalValuePastTheLastStep) {
  const OptimConfig o = schedule(eco::LrSchedule::Cosine, 1e-3, 0.1);
  EXPECT_NEAR(eco::lr_at(o, 150, 10, 100), 0.1 * o.lr, kLrTol);
}

TEST(Schedule, SingleStepRunUsesFullLr) {
  EXPECT_EQ(eco::lr_at(schedule(eco::LrSchedule::Cosine), 0, 0, 1), 1e-3);
}

// ---- memory ledger ----------------------------------------------------------------------------

TEST(Ledger, TotalsAddUpByCategory) {
  MemoryLedger l;
  l.record("w", MemCategory::Weights, 400);
  l.record("w2", MemCategory::Weights, 100);
  l.record("m", MemCategory::OptState, 300);
  l.record("g", MemCategory::Grads, 500);
  EXPECT_EQ(l.total(MemCategory::Weights), 500u);
  EXPECT_EQ(l.total(MemCategory::OptState), 300u);
  EXPECT_EQ(l.total(MemCategory::Grads), 500u);
  EXPECT_EQ(l.total(MemCategory::Scales), 0u);
  EXPECT_EQ(l.total(), 1300u);
  EXPECT_EQ(l.entries().size(), 4u);
  EXPECT_EQ(l.entries()[1].name, "w2");
}

TEST(Ledger, StaticBytesAreWeightsCodesScalesMasterAndOptimizerState) {
  // Distinct powers of two, so the sum shows exactly which categories were counted.
  MemoryLedger l;
  l.record("w", MemCategory::Weights, 1);
  l.record("codes", MemCategory::QuantCodes, 2);
  l.record("scales", MemCategory::Scales, 4);
  l.record("master", MemCategory::Master, 8);
  l.record("m", MemCategory::OptState, 16);
  l.record("g", MemCategory::Grads, 32);
  l.record("acts", MemCategory::Activations, 64);
  l.record("ws", MemCategory::Workspace, 128);
  EXPECT_EQ(l.static_bytes(), 1u + 2 + 4 + 8 + 16);
  EXPECT_EQ(l.total(), 255u);
}

TEST(Ledger, TableMentionsEachNonEmptyCategoryOnly) {
  MemoryLedger l;
  l.record("w", MemCategory::Weights, 4096);
  l.record("codes", MemCategory::QuantCodes, 1024);
  l.record("m", MemCategory::OptState, 8192);
  l.record("acts", MemCategory::Activations, 2048);
  const std::string t = l.table();
  for (const char* name : {"weights", "quant_codes", "optimizer_state", "activations", "total", "static"})
    EXPECT_NE(t.find(name), std::string::npos) << name << " missing from:\n" << t;
  // Empty categories get no row (these names do not occur in the footer text).
  for (const char* name : {"grads", "workspace"})
    EXPECT_EQ(t.find(name), std::string::npos) << name << " listed though empty:\n" << t;
  EXPECT_NE(t.find("15360"), std::string::npos) << "total bytes missing:\n" << t;
}

// ---- parameter table --------------------------------------------------------------------------

TEST(ParamTable, Gpt2SmallHasTheKnown124439808Parameters) {
  const eco::ParamTable t = eco::build_param_table(gpt2_124m());
  EXPECT_EQ(t.total, 124439808);
}

TEST(ParamTable, LlamaCountMatchesTheFormula) {
  for (bool tied : {false, true}) {
    const eco::ModelConfig m = small_llama(tied);
    EXPECT_EQ(eco::build_param_table(m).total, llama_param_count(m)) << "tied " << tied;
  }
}

TEST(ParamTable, UntyingAddsAHeadOfVocabTimesDModel) {
  EXPECT_EQ(eco::build_param_table(small_llama(false)).total -
                eco::build_param_table(small_llama(true)).total,
            1000 * 256);
}

TEST(ParamTable, OffsetsAreContiguousInTableOrder) {
  const eco::ParamTable t = eco::build_param_table(small_llama(false));
  int64_t offset = 0;
  for (const auto& s : t.specs) {
    EXPECT_EQ(s.offset, offset) << s.name;
    offset += s.numel();
  }
  EXPECT_EQ(offset, t.total);
}

TEST(ParamTable, OnlyBlockLinearWeightsAreQuantizable) {
  for (const eco::ModelConfig& m : {gpt2_124m(), small_llama(false)}) {
    const eco::ParamTable t = eco::build_param_table(m);
    int64_t expected = 0;
    for (const auto& s : t.specs) {
      const bool block_matrix = s.name.rfind("h.", 0) == 0 && s.shape.size() == 2;
      EXPECT_EQ(s.quantizable, block_matrix) << eco::enum_name(m.family) << " " << s.name;
      if (block_matrix) expected += s.numel();
    }
    // Per block: qkv 3C^2 + proj C^2 + MLP in (H or 2H) x C + MLP out C x H.
    const int64_t C = m.d_model, H = m.mlp_hidden;
    const int64_t per_block = 4 * C * C + (m.mlp == eco::MlpKind::Swiglu ? 3 : 2) * H * C;
    EXPECT_EQ(t.count_quantizable(), expected);
    EXPECT_EQ(t.count_quantizable(), m.n_layer * per_block) << eco::enum_name(m.family);
  }
}

TEST(ParamTable, WeightDecayOnlyOnMatrices) {
  for (const eco::ModelConfig& m : {gpt2_124m(), small_llama(false)}) {
    for (const auto& s : eco::build_param_table(m).specs)
      EXPECT_EQ(s.weight_decay, s.shape.size() == 2) << eco::enum_name(m.family) << " " << s.name;
  }
}

// ---- plan report ------------------------------------------------------------------------------

TEST(PlanReport, Fp32AdamWCostsTwelveStaticBytesPerParameter) {
  // fp32 weights 4 B + AdamW m 4 B + v 4 B; gradients and activations are not static.
  const eco::Config cfg = eco::parse_config(
      "model: {family: llama, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 64, seq_len: 16}\n"
      "data: {source: synthetic}\ntrain: {max_steps: 1}\n",
      "plan.yaml");
  const std::string report = eco::plan_report(cfg);
  EXPECT_NE(report.find("static bytes per parameter: 12.00"), std::string::npos) << report;
  EXPECT_NE(report.find("h.1.mlp.proj.weight"), std::string::npos) << report;
}

TEST(PlanReport, Gpt2SmallPlansWithoutAllocating) {
  // The planning backend only records sizes, so a 124M model is instant and takes no memory.
  const eco::Config cfg = eco::parse_config(
      "model: {family: gpt2, n_layer: 12, n_head: 12, d_model: 768, vocab_size: 50257,"
      " seq_len: 1024}\ndata: {source: synthetic}\ntrain: {max_steps: 1, batch_size: 4}\n",
      "gpt2.yaml");
  const std::string report = eco::plan_report(cfg);
  EXPECT_NE(report.find("124439808"), std::string::npos) << report;
  EXPECT_NE(report.find("static bytes per parameter: 12.00"), std::string::npos) << report;
}

TEST(PlanReport, DenseModelsHaveNoRoleBreakdown) {
  const eco::Config cfg = eco::parse_config(
      "model: {family: llama, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 64, seq_len: 16}\n"
      "data: {source: synthetic}\ntrain: {max_steps: 1}\n",
      "plan.yaml");
  EXPECT_EQ(eco::plan_report(cfg).find("static by role"), std::string::npos);
}

TEST(PlanReport, MoeRoleSplitSumsToTheTotalsAndExpertsCostOneBytePerParamPlusScales) {
  // configs/smoe-tiny-cpu.yaml: only the experts quantized, fp8-eco-sr (FP8 codes, no master).
  const eco::Config cfg = eco::parse_config(
      "model: {family: gpt2, n_layer: 2, n_head: 4, d_model: 64, vocab_size: 256, seq_len: 64,"
      " moe: {n_experts: 8, top_k: 2, expert_hidden: 128, router: topk_softmax}}\n"
      "data: {source: synthetic}\ntrain: {max_steps: 1, batch_size: 8}\n"
      "precision: {treatment: fp8-eco-sr, quantize: experts}\n",
      "smoe.yaml");
  auto be = eco::make_planning_backend(cfg.device);
  eco::Transformer model(cfg.model, *be, cfg.train.batch_size, cfg.precision.treatment,
                         cfg.precision.quantize);
  eco::Optimizer opt(cfg.optim, model);
  const MemoryLedger& ledger = be->ledger();
  const eco::RoleMemorySplit split = eco::role_memory_split(ledger, model.table());
  EXPECT_EQ(split.expert.weights + split.router.weights + split.dense.weights,
            ledger.total(MemCategory::Weights) + ledger.total(MemCategory::QuantCodes) +
                ledger.total(MemCategory::Scales) + ledger.total(MemCategory::Master));
  EXPECT_EQ(split.expert.opt_state + split.router.opt_state + split.dense.opt_state,
            ledger.total(MemCategory::OptState));
  EXPECT_EQ(split.expert.params + split.router.params + split.dense.params, model.table().total);
  EXPECT_EQ(split.expert.params, 2 * 8 * 2 * 64 * 128);  // 2 layers, 8 experts, fc + proj
  EXPECT_GT(split.router.params, 0);
  // Experts: 1 byte of FP8 code per parameter + the scales, nothing else (ECO keeps no master).
  uint64_t expert_scales = 0;
  for (const auto& e : ledger.entries())
    if (e.category == MemCategory::Scales) expert_scales += e.bytes;
  EXPECT_EQ(ledger.total(MemCategory::Master), 0u);
  EXPECT_EQ(ledger.total(MemCategory::QuantCodes), uint64_t(split.expert.params));
  EXPECT_GT(expert_scales, 0u);
  EXPECT_LT(expert_scales, uint64_t(split.expert.params) / 8);
  EXPECT_EQ(split.expert.weights, uint64_t(split.expert.params) + expert_scales);
  // The router and the dense parameters stay fp32 (4 B/param).
  EXPECT_EQ(split.router.weights, 4 * uint64_t(split.router.params));
  EXPECT_EQ(split.dense.weights, 4 * uint64_t(split.dense.params));
  const std::string report = eco::plan_report(cfg);
  EXPECT_NE(report.find("static by role"), std::string::npos) << report;
  EXPECT_NE(report.find("  expert"), std::string::npos) << report;
  EXPECT_NE(report.find("  router"), std::string::npos) << report;
}
