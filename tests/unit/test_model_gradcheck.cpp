// Whole-model gradient check in float64 (model_gradcheck.h) of both block families, tied and
// untied, and of a batch smaller than allocated.
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
