// Whole-model gradient check in float64 (model_gradcheck.h) of the block families (gpt2, llama,
// gemma3; tied and untied; grouped-query attention), and of a batch smaller than allocated.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "model/transformer.h"
#include "model_gradcheck.h"

namespace {

eco::ModelConfig tiny(eco::ModelFamily family) {
  eco::ModelConfig m = tiny_model_config(family);
  m.tie_embeddings = family == eco::ModelFamily::Gpt2;
  return m;
}

TEST(ModelGradcheck, Gpt2WholeModelMatchesFiniteDifferencesInFloat64) {
  check_model_gradients(tiny(eco::ModelFamily::Gpt2));
}

TEST(ModelGradcheck, LlamaWholeModelMatchesFiniteDifferencesInFloat64) {
  check_model_gradients(tiny(eco::ModelFamily::Llama));
}

TEST(ModelGradcheck, UntiedGpt2AndTiedLlamaAlsoMatch) {
  auto a = tiny(eco::ModelFamily::Gpt2);
  a.tie_embeddings = false;
  check_model_gradients(a);
  auto b = tiny(eco::ModelFamily::Llama);
  b.tie_embeddings = true;
  check_model_gradients(b);
}

// Gemma 3's structure at tiny size: sandwich norms with (1 + w) gains, QK-norm, GeGLU, scaled
// tied embeddings, 4 query heads sharing 2 key/value heads of size 6 (not d_model / n_head),
// layer 0 local (window 3 < T = 5, RoPE base 100) and layer 1 global (base 1000), queries
// scaled by 5^-1/2.
eco::ModelConfig tiny_gemma3() {
  eco::ModelConfig m = tiny_model_config(eco::ModelFamily::Gemma3);
  m.tie_embeddings = true;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.head_dim_override = 6;
  m.sliding_window = 3;
  m.sliding_window_pattern = 2;
  m.rope_local_theta = 100.0f;
  m.rope_theta = 1000.0f;
  m.query_pre_attn_scalar = 5.0f;
  m.norm_eps = 1e-6f;
  return m;
}

TEST(ModelGradcheck, Gemma3WholeModelMatchesFiniteDifferencesInFloat64) {
  const eco::ModelConfig m = tiny_gemma3();
  ASSERT_TRUE(m.layer_is_local(0));
  ASSERT_FALSE(m.layer_is_local(1));
  check_model_gradients(m);
}

// One key/value head for all query heads (Gemma 3 1B's 4:1) and a window of 1 (each query sees
// only itself) in every layer but the last.
TEST(ModelGradcheck, Gemma3WithOneKvHeadAndWindowOfOneAlsoMatches) {
  eco::ModelConfig m = tiny_gemma3();
  m.n_kv_head = 1;
  m.sliding_window = 1;
  m.n_layer = 3;
  m.sliding_window_pattern = 3;
  check_model_gradients(m);
}

// Llama with grouped-query attention and its own head size.
TEST(ModelGradcheck, LlamaWithGroupedQueryAttentionMatches) {
  eco::ModelConfig m = tiny(eco::ModelFamily::Llama);
  m.n_head = 4;
  m.n_kv_head = 2;
  m.head_dim_override = 4;
  check_model_gradients(m);
}

// A smaller batch than allocated uses the leading rows only and gives the same gradients as a
// model allocated for exactly that batch.
TEST(ModelGradcheck, SmallerBatchThanAllocatedGivesSameGradients) {
  const auto cfg = tiny(eco::ModelFamily::Llama);
  auto be1 = eco::make_cpu_backend(eco::DType::F64);
  auto be2 = eco::make_cpu_backend(eco::DType::F64);
  eco::Transformer big(cfg, *be1, 4), exact(cfg, *be2, 1);
  big.init_weights(3);
  exact.init_weights(3);
  std::vector<int32_t> in = {1, 2, 3, 4}, tgt = {2, 3, 4, 5};
  big.zero_grad();
  exact.zero_grad();
  const double l1 = big.forward_backward(in.data(), tgt.data(), 1, 4, 1.0f);
  const double l2 = exact.forward_backward(in.data(), tgt.data(), 1, 4, 1.0f);
  EXPECT_EQ(l1, l2);
  std::vector<double> g1(size_t(big.grads().numel())), g2(g1.size());
  be1->copy_to_host(g1.data(), big.grads());
  be2->copy_to_host(g2.data(), exact.grads());
  EXPECT_EQ(g1, g2);
}

}  // namespace
