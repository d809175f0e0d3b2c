// ecotrain checkpoint -> eco-train export -> model.init_from import, for every family and HF
// class (gpt2, llama with GQA, gemma3, Mixtral, DeepSeek-MoE with shared experts and a dense first
// layer): f32 exports give the same weights bit for bit; --codes exports give the same codes and
// scales; bf16 exports give the weights rounded to bf16. And each way a checkpoint can disagree
// with the run (config.json, a missing, unexpected, misshapen or integer tensor) is one usage
// error naming the tensor or key and both values; a NaN in a tensor is a data error naming the
// file, the tensor and the element; check_hf_import refuses what import_hf refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/config.h"
#include "expect_usage_error.h"
#include "temp_dir.h"
#include "hf/hf_checkpoint.h"
#include "hf/hf_export.h"
#include "hf/hf_import.h"
#include "hf/hf_layout.h"
#include "base/math/bf16.h"
#include "base/backend.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/training_state.h"

namespace {

namespace fs = std::filesystem;

using eco::test::TempDir;

const char* kGpt2 = "family: gpt2, n_layer: 2, n_head: 2, d_model: 16, vocab_size: 24, seq_len: 8";
const char* kLlama =
    "family: llama, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 16, mlp_hidden: 24, "
    "vocab_size: 24, seq_len: 8";
const char* kGemma3 =
    "family: gemma3, n_layer: 2, n_head: 4, n_kv_head: 2, head_dim: 6, d_model: 16, "
    "mlp_hidden: 24, vocab_size: 24, seq_len: 8, sliding_window: 3, sliding_window_pattern: 2";
const char* kMixtral =
    "family: llama, n_layer: 2, n_head: 2, d_model: 16, vocab_size: 24, seq_len: 8, "
    "moe: {n_experts: 4, top_k: 2, expert_hidden: 8}";
const char* kDeepseekMoe =
    "family: llama, n_layer: 3, n_head: 2, d_model: 16, mlp_hidden: 24, vocab_size: 24, "
    "seq_len: 8, moe: {n_experts: 4, top_k: 2, expert_hidden: 8, n_shared_experts: 2, "
    "first_dense: 1, router: softmax_topk}";

eco::Config config(const std::string& model_keys, const std::string& treatment = "fp32") {
  return eco::parse_config("model: {" + model_keys + "}\ndata: {source: synthetic}\n"
                           "train: {max_steps: 1}\nprecision: {treatment: " + treatment + "}\n",
                           "test.yaml");
}

// A model of cfg with every parameter random (gains and biases too), in cfg's treatment.
struct Model {
  explicit Model(const eco::Config& c)
      : cfg(c),
        be(eco::make_cpu_backend(eco::DType::F32)),
        model(std::make_unique<eco::Transformer>(cfg.model, *be, 1, cfg.precision.treatment,
                                                 cfg.precision.quantize)) {}
  void randomize(uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> z(0.0f, 0.3f);
    for (size_t i = 0; i < model->table().specs.size(); ++i) {
      std::vector<float> v(size_t(model->table().specs[i].numel()));
      for (float& x : v) x = z(gen);
      model->store().set(i, v.data());
    }
  }
  std::vector<float> values(size_t i) {
    std::vector<float> v(size_t(model->table().specs[i].numel()));
    model->store().get(i, v.data());
    return v;
  }
  // The checkpoint a run at step 0 would write.
  std::string save(const std::string& dir) {
    eco::Optimizer opt(cfg.optim, *model);
    const std::string path = dir + "/ckpt.bin";
    eco::save_checkpoint(path, eco::capture_state(cfg, 0, *be, eco::persistent_tensors(*model, opt)));
    return path;
  }
  eco::Config cfg;
  std::unique_ptr<eco::Backend> be;
  std::unique_ptr<eco::Transformer> model;
};

std::string exported(Model& m, const TempDir& d, eco::StDType dtype, bool codes = false,
                     uint64_t shard = eco::kHfDefaultShardBytes) {
  const std::string out = d.path + "/hf";
  eco::export_hf(m.save(d.path), {out, dtype, shard, codes});
  return out;
}

void expect_f32_round_trip_bit_exact(const char* model_keys) {
  TempDir d;
  Model a(config(model_keys));
  a.randomize(7);
  const std::string dir = exported(a, d, eco::StDType::F32);
  Model b(config(model_keys));
  eco::import_hf(dir, b.cfg.model, b.model->store());
  for (size_t i = 0; i < a.model->table().specs.size(); ++i)
    EXPECT_EQ(a.values(i), b.values(i)) << a.model->table().specs[i].name;
}

TEST(HfRoundTrip, Gpt2F32IsBitExact) { expect_f32_round_trip_bit_exact(kGpt2); }
TEST(HfRoundTrip, LlamaWithGroupedQueryAttentionF32IsBitExact) {
  expect_f32_round_trip_bit_exact(kLlama);
}
TEST(HfRoundTrip, Gemma3F32IsBitExact) { expect_f32_round_trip_bit_exact(kGemma3); }
TEST(HfRoundTrip, MixtralF32IsBitExact) { expect_f32_round_trip_bit_exact(kMixtral); }
TEST(HfRoundTrip, DeepseekMoeWithSharedExpertsF32IsBitExact) {
  expect_f32_round_trip_bit_exact(kDeepseekMoe);
}

TEST(HfRoundTrip, DeepseekMoeWithoutSharedExpertsF32IsBitExact) {
  expect_f32_round_trip_bit_exact(
      "family: llama, n_layer: 2, n_head: 2, d_model: 16, vocab_size: 24, seq_len: 8, "
      "moe: {n_experts: 4, top_k: 2, expert_hidden: 8, router: softmax_topk}");
}

// Mixtral where transformers' Mixtral computes the same gates; DeepSeek-MoE's naming otherwise.
TEST(HfLayout, PicksMixtralOnlyWhereItsRouterAndLayersMatch) {
  const auto arch = [](const std::string& moe) {
    return eco::hf_arch_of(config("family: llama, n_layer: 2, n_head: 2, d_model: 16, "
                                  "vocab_size: 24, seq_len: 8, moe: {n_experts: 4, top_k: 2, "
                                  "expert_hidden: 8" + moe + "}").model);
  };
  EXPECT_EQ(arch(""), eco::HfArch::Mixtral);  // topk_softmax
  EXPECT_EQ(arch(", router: softmax_topk, norm_topk: true"), eco::HfArch::Mixtral);
  EXPECT_EQ(arch(", router: softmax_topk"), eco::HfArch::DeepseekMoe);  // no renormalisation
  EXPECT_EQ(arch(", n_shared_experts: 1"), eco::HfArch::DeepseekMoe);
  EXPECT_EQ(arch(", first_dense: 1"), eco::HfArch::DeepseekMoe);
  expect_usage_error([&] { arch(", router: sigmoid_bias"); }, {"sigmoid_bias"});
  expect_usage_error([&] { arch(", every: 2, first_dense: 1"); },
                     {"first_k_dense_replace", "moe_layer_freq"});
}

// GPT-2's causal-mask buffers are the whole names [transformer.]h.<digits>.attn.[masked_]bias,
// and only for GPT-2; anything else in a checkpoint is a tensor to map.
TEST(HfLayout, OnlyGpt2MaskBuffersAreIgnorable) {
  for (const char* name : {"h.0.attn.bias", "h.11.attn.masked_bias", "transformer.h.3.attn.bias",
                           "transformer.h.12.attn.masked_bias"})
    EXPECT_TRUE(eco::hf_ignorable(eco::HfArch::Gpt2, name)) << name;
  for (const char* name :
       {"h.attn.bias", "h.x.attn.bias", "h.0.attn.bias.x", "h.0.attn.c_attn.bias", "h.0.attn.",
        "transformer.transformer.h.0.attn.bias", "model.h.0.attn.bias", "h.0.attn.masked_",
        "h.0.attn.masked_masked_bias", "h.0.mlp.bias", "h.0.attnbias", ".h.0.attn.bias", ""})
    EXPECT_FALSE(eco::hf_ignorable(eco::HfArch::Gpt2, name)) << name;
  EXPECT_FALSE(eco::hf_ignorable(eco::HfArch::Llama, "h.0.attn.bias"));
}

TEST(HfRoundTrip, Bf16ExportRoundsEachWeightToNearestBf16) {
  TempDir d;
  Model a(config(kLlama));
  a.randomize(8);
  const std::string dir = exported(a, d, eco::StDType::BF16);
  Model b(config(kLlama));
  eco::import_hf(dir, b.cfg.model, b.model->store());
  for (size_t i = 0; i < a.model->table().specs.size(); ++i) {
    std::vector<float> want = a.values(i);
    for (float& x : want) x = eco::bf16_to_float(eco::float_to_bf16(x));
    EXPECT_EQ(b.values(i), want) << a.model->table().specs[i].name;
  }
}

TEST(HfRoundTrip, ShardedExportImportsTheSameWeights) {
  TempDir d;
  Model a(config(kGpt2));
  a.randomize(9);
  const std::string dir = exported(a, d, eco::StDType::F32, false, 4096);
  ASSERT_TRUE(fs::exists(dir + "/model.safetensors.index.json"));
  ASSERT_FALSE(fs::exists(dir + "/model.safetensors"));
  Model b(config(kGpt2));
  eco::import_hf(dir, b.cfg.model, b.model->store());
  for (size_t i = 0; i < a.model->table().specs.size(); ++i)
    EXPECT_EQ(a.values(i), b.values(i)) << a.model->table().specs[i].name;
}

// Every quantized parameter's codes and scales, as stored.
std::vector<std::pair<std::vector<uint8_t>, std::vector<float>>> all_codes(Model& m) {
  std::vector<std::pair<std::vector<uint8_t>, std::vector<float>>> out;
  eco::ParamStore& s = m.model->store();
  for (size_t i = 0; i < s.size(); ++i) {
    if (!s.quantized(i)) continue;
    const eco::QTensor& q = s.qtensor(i);
    std::vector<uint8_t> codes(size_t(eco::code_bytes(q.format, q.numel())));
    std::vector<float> scales(size_t(eco::num_scales(q.granularity, q.rows, q.cols)));
    s.get_codes(i, codes.data(), scales.data());
    out.emplace_back(std::move(codes), std::move(scales));
  }
  return out;
}

// Whether two scales are equal, or (ulps 1) neighbouring floats.
bool within_ulps(float a, float b, uint32_t ulps) {
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return (ua > ub ? ua - ub : ub - ua) <= ulps;
}

// codes: an export with --codes (scales must be bit-equal); else a dequantized f32 export,
// whose RTN requantization must give every code back, each scale within one ulp.
void expect_codes_round_trip(const char* model_keys, const std::string& treatment, bool codes) {
  TempDir d;
  Model a(config(model_keys, treatment));
  a.randomize(11);
  const std::string dir = exported(a, d, eco::StDType::F32, codes);
  if (codes) {
    EXPECT_TRUE(eco::HfCheckpoint(dir).metadata().count("eco.codes.format"));
  }
  Model b(config(model_keys, treatment));
  eco::import_hf(dir, b.cfg.model, b.model->store());
  const auto want = all_codes(a), got = all_codes(b);
  ASSERT_EQ(want.size(), got.size());
  ASSERT_GT(want.size(), 0u);
  size_t scales = 0, moved = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(want[k].first, got[k].first) << "codes of quantized parameter " << k;
    ASSERT_EQ(want[k].second.size(), got[k].second.size());
    for (size_t j = 0; j < want[k].second.size(); ++j) {
      const float w = want[k].second[j], g = got[k].second[j];
      EXPECT_TRUE(within_ulps(w, g, codes ? 0 : 1)) << "scale " << j << " of parameter " << k;
      ++scales;
      moved += w != g;
    }
  }
  std::printf("  %s %s: every code equal, %zu of %zu scales moved by one ulp\n", treatment.c_str(),
              codes ? "--codes" : "dequantized f32", moved, scales);
  if (!codes) return;
  // Every value (dense parameters too) is the same.
  for (size_t i = 0; i < a.model->table().specs.size(); ++i)
    EXPECT_EQ(a.values(i), b.values(i)) << a.model->table().specs[i].name;
}

// --codes: the codes and scales themselves travel (no requantization).
TEST(HfRoundTrip, Fp8CodesExportKeepsCodesAndScales) {
  expect_codes_round_trip(kLlama, "fp8-eco-rtn", true);
}
TEST(HfRoundTrip, Gpt2TransposedConv1DCodesKeepTheirRows) {
  expect_codes_round_trip(kGpt2, "fp8-naive-sr", true);
}
TEST(HfRoundTrip, Int4PerTensorCodesSplitIntoQKVAndJoinBack) {
  expect_codes_round_trip(kDeepseekMoe, "int4-eco-rtn", true);
}
// Without --codes: f32 values decode(code) x scale, requantized by RTN on import. Every code comes
// back (value / scale is within an ulp or two of the code's grid value, far from a rounding
// boundary), but not always the scale: the largest element is rho x scale rounded to float, and
// group_scale of that is scale or a neighbouring float. So the dequantized path keeps the codes
// and moves some scales by one ulp; --codes is the exact path.
TEST(HfRoundTrip, DequantizedF32ExportRequantizesToTheSameFp8CodesScalesWithinAnUlp) {
  expect_codes_round_trip(kLlama, "fp8-eco-rtn", false);
}
TEST(HfRoundTrip, DequantizedF32ExportRequantizesToTheSameInt4CodesScalesWithinAnUlp) {
  expect_codes_round_trip(kMixtral, "int4-mw-rtn", false);
}

TEST(HfRoundTrip, CodesImportIntoAnFp32RunDequantizes) {
  TempDir d;
  Model a(config(kLlama, "fp8-eco-rtn"));
  a.randomize(12);
  const std::string dir = exported(a, d, eco::StDType::F32, true);
  Model b(config(kLlama));
  eco::import_hf(dir, b.cfg.model, b.model->store());
  for (size_t i = 0; i < a.model->table().specs.size(); ++i)
    EXPECT_EQ(a.values(i), b.values(i)) << a.model->table().specs[i].name;
}

// ---- refusals ---------------------------------------------------------------------------------

TEST(HfExport, ModelsWithoutATransformersClassAreRefused) {
  TempDir d;
  Model a(config("family: gpt2, n_layer: 1, n_head: 2, d_model: 16, vocab_size: 24, seq_len: 8, "
                 "moe: {n_experts: 2, top_k: 2, expert_hidden: 8}"));
  const std::string ckpt = a.save(d.path);
  expect_usage_error([&] { eco::export_hf(ckpt, {d.path + "/hf"}); },
                     {"no Hugging Face equivalent", "GPT-2 has no mixture-of-experts"});
  EXPECT_FALSE(fs::exists(d.path + "/hf/model.safetensors"));
}

// Rewrites dir/model.safetensors through `edit`, which may drop, add or change tensors.
void rewrite(const std::string& dir,
             const std::function<void(std::vector<eco::SafetensorsOutput>&)>& edit) {
  const std::string path = dir + "/model.safetensors";
  auto file = std::make_shared<eco::SafetensorsFile>(path);
  std::vector<eco::SafetensorsOutput> out;
  for (const auto& e : file->entries()) {
    auto bytes = std::make_shared<std::vector<char>>(file->read_bytes(e));
    out.push_back({e.name, e.dtype, e.shape,
                   [bytes](char* dst) { std::memcpy(dst, bytes->data(), bytes->size()); }});
  }
  edit(out);
  fs::remove(path);
  eco::write_safetensors(path, out, file->metadata());
}

struct BadCheckpoint : ::testing::Test {
  void SetUp() override {
    Model a(config(kGpt2));
    a.randomize(13);
    dir = exported(a, d, eco::StDType::F32);
  }
  void expect_import_error(std::initializer_list<std::string> parts, const char* keys = kGpt2) {
    Model b(config(keys));
    expect_usage_error([&] { eco::import_hf(dir, b.cfg.model, b.model->store()); }, parts);
  }
  eco::SafetensorsOutput& named(std::vector<eco::SafetensorsOutput>& all, const std::string& n) {
    for (auto& t : all)
      if (t.name == n) return t;
    throw std::runtime_error("no tensor " + n);
  }
  TempDir d;
  std::string dir;
};

TEST_F(BadCheckpoint, MissingTensorIsNamed) {
  rewrite(dir, [](auto& all) { std::erase_if(all, [](auto& t) { return t.name == "transformer.h.1.ln_2.bias"; }); });
  expect_import_error({"missing tensor 'transformer.h.1.ln_2.bias'", "ecotrain's 'h.1.norm2.bias'"});
}

TEST_F(BadCheckpoint, UnexpectedTensorIsNamed) {
  rewrite(dir, [](auto& all) {
    all.push_back({"transformer.h.2.ln_1.weight", eco::StDType::F32, {16},
                   [](char* p) { std::memset(p, 0, 64); }});
  });
  expect_import_error({"unexpected tensor 'transformer.h.2.ln_1.weight'", "GPT2LMHeadModel"});
}

TEST_F(BadCheckpoint, WrongShapeNamesBothShapes) {
  rewrite(dir, [&](auto& all) { named(all, "transformer.h.0.attn.c_attn.weight").shape = {48, 16}; });
  expect_import_error({"tensor 'transformer.h.0.attn.c_attn.weight' has shape [48, 16], the run's "
                       "model expects [16, 48]",
                       "h.0.attn.qkv.weight"});
}

TEST_F(BadCheckpoint, IntegerDtypeIsRefused) {
  rewrite(dir, [&](auto& all) { named(all, "transformer.ln_f.weight").dtype = eco::StDType::I32; });
  expect_import_error({"tensor 'transformer.ln_f.weight' has dtype I32, expected F32, BF16 or F16"});
}

TEST_F(BadCheckpoint, ConfigJsonMismatchNamesEachKeyAndBothValues) {
  expect_import_error({"config.json does not describe the run's model",
                       "n_embd is 16, the run's model.d_model is 32",
                       "n_head is 2, the run's model.n_head is 4"},
                      "family: gpt2, n_layer: 2, n_head: 4, d_model: 32, vocab_size: 24, seq_len: 8");
  expect_import_error({"model_type is \"gpt2\", the run's model (family llama) is llama"}, kLlama);
  expect_import_error({"layer_norm_epsilon is 1e-05, the run's model.norm_eps is 0.001"},
                      "family: gpt2, n_layer: 2, n_head: 2, d_model: 16, vocab_size: 24, "
                      "seq_len: 8, norm_eps: 0.001");
}

TEST_F(BadCheckpoint, TruncatedWeightsFileIsADataError) {
  const std::string path = dir + "/model.safetensors";
  fs::resize_file(path, fs::file_size(path) - 100);
  Model b(config(kGpt2));
  try {
    eco::import_hf(dir, b.cfg.model, b.model->store());
    ADD_FAILURE() << "a truncated file was imported";
  } catch (const eco::Error& e) {
    EXPECT_EQ(e.kind(), eco::ErrorKind::Data);
    EXPECT_NE(std::string(e.what()).find("run past the data region"), std::string::npos)
        << e.what();
  }
}

// A NaN in a tensor: import_hf (under fp32, and under int4-eco-sr, which would quantize it) and
// check_hf_import refuse it with a data error naming the file, the tensor and the element.
TEST_F(BadCheckpoint, NonFiniteValueIsADataErrorNamingTheFileTensorAndElement) {
  rewrite(dir, [&](auto& all) {
    auto& t = named(all, "transformer.h.1.mlp.c_fc.weight");  // [16, 64]
    t.fill = [fill = t.fill](char* p) {
      fill(p);
      const float nan = std::nanf("");
      std::memcpy(p + 4 * 21, &nan, 4);
    };
  });
  const auto expect_refused = [&](const std::function<void()>& fn) {
    expect_data_error(fn, {dir + "/model.safetensors: tensor 'transformer.h.1.mlp.c_fc.weight' "
                           "holds 1 non-finite value(s), the first (nan) at element 21 (index "
                           "[0, 21] of shape [16, 64])"});
  };
  for (const char* treatment : {"fp32", "int4-eco-sr"}) {
    Model b(config(kGpt2, treatment));
    expect_refused([&] { eco::import_hf(dir, b.cfg.model, b.model->store()); });
  }
  expect_refused([&] { eco::check_hf_import(dir, config(kGpt2).model); });
}

TEST(HfImportCheck, AcceptsAGoodExportAndRefusesWhatTheImportRefuses) {
  TempDir d;
  Model a(config(kLlama));
  a.randomize(3);
  const std::string dir = exported(a, d, eco::StDType::BF16);
  eco::check_hf_import(dir, config(kLlama).model);
  expect_usage_error([&] { eco::check_hf_import(dir, config(kGpt2).model); },
                     {"config.json does not describe the run's model"});
  fs::remove(dir + "/model.safetensors");
  expect_usage_error([&] { eco::check_hf_import(dir, config(kLlama).model); },
                     {"holds neither model.safetensors"});
}

}  // namespace
