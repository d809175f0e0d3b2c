// ecotrain against transformers on the checkpoints of tools/hf_fixture.py (tests/fixtures/hf/):
//   hf/<family>:        made by transformers' save_pretrained (gpt2 F32, llama BF16, gemma3 F16,
//                       mixtral F32); ecotrain imports it (model.init_from's path) and its logits
//                       must be transformers'.
//   hf/export_<family>: written by eco-train export from a trained ecotrain checkpoint;
//                       transformers loaded it and computed the logits stored beside it, which
//                       ecotrain's logits of the same file must match.
// Tolerance: relative L2 error of the logits 1e-5. Both sides compute in float32 from the same
// (already rounded) weights, in different orders (BLAS, torch's SDPA / eager kernels, RoPE
// angles in double here and float there): 1e-7..1e-6 is what is measured; a wrong name,
// transposition, split or norm convention gives errors of order 1.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/config.h"
#include "hf/hf_import.h"
#include "hf/safetensors.h"
#include "base/backend.h"
#include "model/transformer.h"

namespace {

constexpr double kLogitsTolerance = 1e-5;

std::string fixture(const std::string& name) {
  return std::string(ECO_FIXTURE_DIR) + "/hf/" + name;
}

// The run's config as a user writes it: the model keys plus model.init_from.
eco::Config run_config(const std::string& model_keys, const std::string& dir) {
  const std::string yaml = "model: {" + model_keys + ", init_from: " + dir +
                           "}\ndata: {source: synthetic}\ntrain: {max_steps: 1}\n";
  return eco::parse_config(yaml, "test.yaml");
}

void expect_logits_match(const std::string& name, const std::string& model_keys) {
  const std::string dir = fixture(name);
  const eco::Config cfg = run_config(model_keys, dir);
  const eco::SafetensorsFile ref(dir + "/logits.safetensors");
  const eco::SafetensorsEntry* tok = ref.find("tokens");
  const eco::SafetensorsEntry* want_e = ref.find("logits");
  ASSERT_TRUE(tok && want_e && tok->shape.size() == 2 && want_e->shape.size() == 3);
  const int B = int(tok->shape[0]), T = int(tok->shape[1]), V = int(want_e->shape[2]);
  ASSERT_EQ(V, cfg.model.vocab_size);
  const std::vector<char> raw = ref.read_bytes(*tok);
  std::vector<int32_t> tokens(size_t(B) * T);
  std::memcpy(tokens.data(), raw.data(), raw.size());
  const std::vector<float> want = ref.read_floats(*want_e);

  auto be = eco::make_cpu_backend(eco::DType::F32);
  eco::Transformer model(cfg.model, *be, B);
  eco::import_hf(cfg.model.init_from, cfg.model, model.store());
  const eco::Tensor& logits = model.forward_logits(tokens.data(), B, T);
  std::vector<float> all(size_t(logits.numel()));
  be->copy_to_host(all.data(), logits);
  double num = 0, den = 0;
  for (int n = 0; n < B * T; ++n)
    for (int v = 0; v < V; ++v) {
      const double got = all[size_t(n) * size_t(model.logits_stride()) + size_t(v)];
      const double w = want[size_t(n) * V + size_t(v)];
      num += (got - w) * (got - w);
      den += w * w;
    }
  const double err = std::sqrt(num / den);
  std::printf("  hf/%s: logits rel err %.2e (tol %.0e)\n", name.c_str(), err, kLogitsTolerance);
  EXPECT_LE(err, kLogitsTolerance) << name;
}

const char* kGpt2 = "family: gpt2, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 37, seq_len: 8";
const char* kLlama =
    "family: llama, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 32, mlp_hidden: 48, "
    "vocab_size: 37, seq_len: 8";
const char* kGemma3 =
    "family: gemma3, n_layer: 2, n_head: 4, n_kv_head: 2, head_dim: 12, d_model: 32, "
    "mlp_hidden: 48, vocab_size: 37, seq_len: 8, sliding_window: 3, sliding_window_pattern: 2, "
    "rope_theta: 10000, rope_local_theta: 100, query_pre_attn_scalar: 10";
const char* kMixtral =
    "family: llama, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 32, vocab_size: 37, "
    "seq_len: 8, moe: {n_experts: 4, top_k: 2, expert_hidden: 16}";

TEST(HfFixture, Gpt2FromTransformersReproducesItsLogits) { expect_logits_match("gpt2", kGpt2); }
TEST(HfFixture, LlamaBf16FromTransformersReproducesItsLogits) {
  expect_logits_match("llama", kLlama);
}
TEST(HfFixture, Gemma3F16FromTransformersReproducesItsLogits) {
  expect_logits_match("gemma3", kGemma3);
}
TEST(HfFixture, MixtralFromTransformersReproducesItsLogits) {
  expect_logits_match("mixtral", kMixtral);
}

TEST(HfFixture, Gpt2ExportGivesTransformersEcotrainsLogits) {
  expect_logits_match("export_gpt2", kGpt2);
}
TEST(HfFixture, LlamaExportOfFp8RunGivesTransformersEcotrainsLogits) {
  expect_logits_match("export_llama", kLlama);
}
TEST(HfFixture, Gemma3ExportGivesTransformersEcotrainsLogits) {
  expect_logits_match("export_gemma3", kGemma3);
}
TEST(HfFixture, MixtralExportGivesTransformersEcotrainsLogits) {
  expect_logits_match("export_mixtral", kMixtral);
}

}  // namespace
