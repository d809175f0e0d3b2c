// Whole-model gradient check in float64: the analytic gradient of the mean cross-entropy loss
// of both block families against central finite differences, for every parameter tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "model/transformer.h"

namespace {

eco::ModelConfig tiny(eco::ModelFamily family) {
  eco::ModelConfig m;
  m.set_family(family);
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = 8;
  m.mlp_hidden = 12;
  m.vocab_size = 11;
  m.seq_len = 5;
  m.max_seq_len = 6;
  m.tie_embeddings = family == eco::ModelFamily::Gpt2;
  return m;
}

// Perturbs each of up to `per_tensor` elements of every parameter tensor and compares
// (L(p+h) - L(p-h)) / 2h with the analytic gradient. In float64 with h = 1e-5 the truncation
// error is ~h^2 * L''' ~ 1e-10 and rounding ~1e-16 / h ~ 1e-11, so 1e-6 relative (with an
// absolute floor of 1e-9 for near-zero entries) leaves a wide margin while any wrong term
// (typically >= 1e-2 relative) fails.
void check_model(const eco::ModelConfig& cfg) {
  auto be = eco::make_cpu_backend(eco::DType::F64);
  const int B = 2, T = cfg.seq_len;
  eco::Transformer model(cfg, *be, B);
  model.init_weights(7);
  // Larger-than-init weights so every path carries signal (init std 0.02 makes some tiny).
  // All parameters as one host vector laid out like the gradients (spec.offset).
  std::vector<double> p(size_t(model.table().total));
  const auto& specs = model.table().specs;
  auto upload = [&] {
    for (size_t i = 0; i < specs.size(); ++i) model.store().set(i, p.data() + specs[i].offset);
  };
  eco::Rng rng(99);
  for (const auto& s : specs)
    for (int64_t k = 0; k < s.numel(); ++k)
      p[s.offset + k] = s.init_std > 0 ? 0.3 * rng.normal() : s.init_value + 0.1 * rng.normal();
  upload();

  std::vector<int32_t> in(B * T), tgt(B * T);
  for (auto& t : in) t = int32_t(rng.next_u64() % uint64_t(cfg.vocab_size));
  for (auto& t : tgt) t = int32_t(rng.next_u64() % uint64_t(cfg.vocab_size));

  model.zero_grad();
  model.forward_backward(in.data(), tgt.data(), B, T, 1.0f);
  std::vector<double> g(p.size());
  be->copy_to_host(g.data(), model.grads());

  const double h = 1e-5;
  const int per_tensor = 6;
  for (const auto& s : model.table().specs) {
    for (int j = 0; j < per_tensor && j < s.numel(); ++j) {
      const int64_t idx = s.offset + int64_t(rng.next_u64() % uint64_t(s.numel()));
      const double orig = p[idx];
      p[idx] = orig + h;
      upload();
      const double lp = model.forward_loss(in.data(), tgt.data(), B, T);
      p[idx] = orig - h;
      upload();
      const double lm = model.forward_loss(in.data(), tgt.data(), B, T);
      p[idx] = orig;
      const double fd = (lp - lm) / (2 * h);
      const double tol = 1e-6 * std::max(std::abs(fd), std::abs(g[idx])) + 1e-9;
      EXPECT_NEAR(g[idx], fd, tol) << eco::enum_name(cfg.family) << " parameter " << s.name << " element "
                                   << idx - s.offset;
    }
  }
  upload();
}

TEST(ModelGradcheck, Gpt2WholeModelMatchesFiniteDifferencesInFloat64) {
  check_model(tiny(eco::ModelFamily::Gpt2));
}

TEST(ModelGradcheck, LlamaWholeModelMatchesFiniteDifferencesInFloat64) {
  check_model(tiny(eco::ModelFamily::Llama));
}

TEST(ModelGradcheck, UntiedGpt2AndTiedLlamaAlsoMatch) {
  auto a = tiny(eco::ModelFamily::Gpt2);
  a.tie_embeddings = false;
  check_model(a);
  auto b = tiny(eco::ModelFamily::Llama);
  b.tie_embeddings = true;
  check_model(b);
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
