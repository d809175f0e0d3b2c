// A whole-model gradient check in float64 (shared by the dense and the MoE tests): the
// analytic gradient of the objective forward_backward differentiates (the mean cross-entropy,
// plus the MoE aux and z losses: Transformer::moe_loss, 0 for a dense model) against central
// finite differences, for every parameter tensor.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/rng.h"
#include "model/transformer.h"

// The tiny model the whole-model checks run: 2 layers, d 8, 2 heads, MLP 12, vocabulary 11,
// sequence 5 (room for 6), untied; the dense and MoE tests add what they vary.
inline eco::ModelConfig tiny_model_config(eco::ModelFamily family) {
  eco::ModelConfig m;
  m.set_family(family);
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = 8;
  m.mlp_hidden = 12;
  m.vocab_size = 11;
  m.seq_len = 5;
  m.max_seq_len = 6;
  return m;
}

// Perturbs each of up to `per_tensor` elements of every parameter tensor and compares
// (L(p+h) - L(p-h)) / 2h with the analytic gradient. In float64 with h = 1e-5 the truncation
// error is ~h^2 * L''' ~ 1e-10 and rounding ~1e-16 / h ~ 1e-11, so 1e-6 relative (with an
// absolute floor of 1e-9 for near-zero entries) leaves a wide margin while any wrong term
// (typically >= 1e-2 relative) fails.
inline void check_model_gradients(const eco::ModelConfig& cfg, int per_tensor = 6) {
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
  for (const auto& s : model.table().specs) {
    for (int j = 0; j < per_tensor && j < s.numel(); ++j) {
      const int64_t idx = s.offset + int64_t(rng.next_u64() % uint64_t(s.numel()));
      const double orig = p[idx];
      p[idx] = orig + h;
      upload();
      const double lp = model.forward_loss(in.data(), tgt.data(), B, T) + model.moe_loss();
      p[idx] = orig - h;
      upload();
      const double lm = model.forward_loss(in.data(), tgt.data(), B, T) + model.moe_loss();
      p[idx] = orig;
      const double fd = (lp - lm) / (2 * h);
      const double tol = 1e-6 * std::max(std::abs(fd), std::abs(g[idx])) + 1e-9;
      EXPECT_NEAR(g[idx], fd, tol) << eco::enum_name(cfg.family) << (cfg.moe.enabled() ? " moe" : "") << " parameter " << s.name << " element "
                                   << idx - s.offset;
    }
  }
  upload();
}

