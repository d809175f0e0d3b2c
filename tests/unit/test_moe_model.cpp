// The MoE MLP inside the model (model/moe_mlp.h): whole-model gradients against finite
// differences in float64 (every router mode, shared experts, SwiGLU experts, capacity), one
// expert with top-1 equals the dense MLP bit for bit, the dropless output is equivariant to
// permuting the tokens, and every treatment trains the expert linears under quantize: experts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/rng.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/moe_mlp.h"
#include "model/transformer.h"
#include "model_gradcheck.h"
#include "optim/optimizer.h"

namespace {

using eco::ModelConfig;
using eco::MoeRouter;

ModelConfig tiny_moe(eco::ModelFamily family, MoeRouter router) {
  ModelConfig m = tiny_model_config(family);
  m.moe.n_experts = 4;
  m.moe.top_k = 2;
  m.moe.expert_hidden = 6;
  m.moe.expert_act = m.mlp;
  m.moe.router = router;
  m.moe.aux_loss_coef = 0.1;
  m.moe.z_loss_coef = 0.05;
  return m;
}

size_t index_of(const eco::ParamTable& t, const std::string& name) {
  const int i = t.index_of(name);
  if (i < 0) ADD_FAILURE() << "no parameter " << name;
  return size_t(std::max(i, 0));
}

// Whole-model finite differences (model_gradcheck.h) on the cross-entropy plus the aux and
// z losses. The weights' std 0.3 spreads the router logits, so a perturbation of 1e-5 flips no
// expert choice (a flip would show as a gradient mismatch far beyond the tolerance).
void check_model(const ModelConfig& cfg) { check_model_gradients(cfg, 4); }

TEST(MoeModelGradcheck, TopkSoftmaxGeluExpertsMatchFiniteDifferences) {
  check_model(tiny_moe(eco::ModelFamily::Gpt2, MoeRouter::TopkSoftmax));
}

TEST(MoeModelGradcheck, SoftmaxTopkSwigluWithSharedExpertsMatchesFiniteDifferences) {
  ModelConfig m = tiny_moe(eco::ModelFamily::Llama, MoeRouter::SoftmaxTopk);
  m.moe.n_shared_experts = 2;
  m.moe.first_dense = 1;  // layer 0 dense, layer 1 MoE
  check_model(m);
  m.moe.norm_topk = true;
  check_model(m);
}

TEST(MoeModelGradcheck, SigmoidBiasMatchesFiniteDifferences) {
  check_model(tiny_moe(eco::ModelFamily::Llama, MoeRouter::SigmoidBias));
}

TEST(MoeModelGradcheck, WithACapacityThatDropsTokensMatchesFiniteDifferences) {
  ModelConfig m = tiny_moe(eco::ModelFamily::Gpt2, MoeRouter::SoftmaxTopk);
  m.moe.capacity_factor = 0.5;  // capacity ceil(10 * 2 / 4 * 0.5) = 3 of 5 slots per expert
  check_model(m);
}

// One expert with top-1: every gate is exactly 1, the dispatch is the identity, so the MoE model
// with the dense model's weights computes the same bits: loss and every shared gradient.
TEST(MoeModel, OneExpertTopOneEqualsTheDenseMlpBitForBit) {
  for (eco::ModelFamily family : {eco::ModelFamily::Gpt2, eco::ModelFamily::Llama}) {
    ModelConfig dense = tiny_moe(family, MoeRouter::TopkSoftmax);
    dense.moe = eco::MoeConfig{};
    ModelConfig moe = tiny_moe(family, MoeRouter::TopkSoftmax);
    moe.moe.n_experts = 1;
    moe.moe.top_k = 1;
    moe.moe.expert_hidden = dense.mlp_hidden;
    moe.moe.z_loss_coef = 0;  // the z-loss has a gradient even with one expert
    auto be1 = eco::make_cpu_backend(), be2 = eco::make_cpu_backend();
    eco::Transformer a(dense, *be1, 2), b(moe, *be2, 2);
    a.init_weights(5);
    b.init_weights(6);
    auto moe_name = [](std::string n) {
      const size_t at = n.find("mlp.");
      return at == std::string::npos ? n : n.insert(at + 4, "experts.0.");
    };
    for (size_t i = 0; i < a.table().specs.size(); ++i) {
      std::vector<float> w(size_t(a.table().specs[i].numel()));
      a.store().get(i, w.data());
      b.store().set(index_of(b.table(), moe_name(a.table().specs[i].name)), w.data());
    }
    std::vector<int32_t> in = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, tgt = {2, 3, 4, 5, 6, 7, 8, 9, 10, 0};
    a.zero_grad();
    b.zero_grad();
    EXPECT_EQ(a.forward_backward(in.data(), tgt.data(), 2, 5, 1.0f),
              b.forward_backward(in.data(), tgt.data(), 2, 5, 1.0f));
    for (size_t i = 0; i < a.table().specs.size(); ++i) {
      const std::string name = a.table().specs[i].name;
      const size_t j = index_of(b.table(), moe_name(name));
      std::vector<float> ga(size_t(a.table().specs[i].numel())), gb(ga.size());
      be1->copy_to_host(ga.data(), a.grad(i));
      be2->copy_to_host(gb.data(), b.grad(j));
      EXPECT_EQ(ga, gb) << eco::enum_name(family) << " " << name;
    }
  }
}

// Dropless routing treats each token alone: permuting the tokens permutes the output. Equal up
// to the expert GEMMs' rounding (a token's row moves within its expert's segment, and BLAS may
// block a segment's rows differently): 1e-12 in float64.
TEST(MoeModel, DroplessOutputIsEquivariantToPermutingTheTokens) {
  ModelConfig cfg = tiny_moe(eco::ModelFamily::Llama, MoeRouter::SoftmaxTopk);
  cfg.moe.n_shared_experts = 1;
  auto be = eco::make_cpu_backend(eco::DType::F64);
  const eco::ParamTable table = eco::build_param_table(cfg);
  eco::ParamStore store(table, eco::Treatment{}, *be);
  store.init(3);
  const eco::Tensor grads = be->alloc("grads", {table.total}, eco::DType::F64,
                                      eco::MemCategory::Grads);
  const eco::ModelContext ctx{cfg, *be, store, grads};
  const int N = 23, C = cfg.d_model;
  eco::MoeMlp mlp(ctx, "h.0.", 0, N);
  eco::Rng rng(8);
  std::vector<double> x(size_t(N * C)), xp(x.size());
  for (auto& v : x) v = rng.normal();
  std::vector<int> perm(N);
  std::iota(perm.begin(), perm.end(), 0);
  for (int i = N - 1; i > 0; --i) std::swap(perm[size_t(i)], perm[rng.next_u64() % uint64_t(i + 1)]);
  for (int t = 0; t < N; ++t)
    std::copy_n(x.begin() + perm[size_t(t)] * C, C, xp.begin() + t * C);
  auto run = [&](const std::vector<double>& host) {
    const eco::Tensor in = be->alloc("in", {N, C}, eco::DType::F64, eco::MemCategory::Workspace);
    const eco::Tensor out = be->alloc("out", {N, C}, eco::DType::F64, eco::MemCategory::Workspace);
    be->copy_from_host(in, host.data());
    mlp.forward(ctx, out, in, N);
    std::vector<double> o(host.size());
    be->copy_to_host(o.data(), out);
    return o;
  };
  const std::vector<double> y = run(x), yp = run(xp);
  for (int t = 0; t < N; ++t)
    for (int c = 0; c < C; ++c)
      EXPECT_NEAR(yp[size_t(t * C + c)], y[size_t(perm[size_t(t)] * C + c)], 1e-12);
}

// The CPU reference with the CUDA backend's 16-row expert segments: the padding rows (zero
// inputs through the expert GEMMs, zero output gradients) change nothing but the GEMMs' row
// counts. Loss and every gradient equal the unpadded model's to 1e-12 relative in float64 (BLAS
// may block a taller segment's reductions differently), shared experts and a capacity included.
class PaddedCpuBackend final : public eco::CpuBackend<double> {
 public:
  int moe_row_align() const override { return 16; }
};

TEST(MoeModel, SegmentsPaddedTo16RowsGiveTheUnpaddedGradients) {
  for (const int64_t capacity_drop : {0, 1}) {
    ModelConfig cfg = tiny_moe(eco::ModelFamily::Gpt2, MoeRouter::TopkSoftmax);
    cfg.moe.n_shared_experts = 1;
    if (capacity_drop) cfg.moe.capacity_factor = 0.5;
    auto be1 = eco::make_cpu_backend(eco::DType::F64);
    PaddedCpuBackend be2;
    ASSERT_EQ(be2.moe_row_align(), 16);
    eco::Transformer a(cfg, *be1, 2), b(cfg, be2, 2);
    a.init_weights(5);
    b.init_weights(5);
    std::vector<int32_t> in(10), tgt(10);
    for (int i = 0; i < 10; ++i) in[size_t(i)] = (7 * i + 2) % 11, tgt[size_t(i)] = (3 * i + 1) % 11;
    a.zero_grad();
    b.zero_grad();
    const double la = a.forward_backward(in.data(), tgt.data(), 2, 5, 1.0f);
    const double lb = b.forward_backward(in.data(), tgt.data(), 2, 5, 1.0f);
    EXPECT_NEAR(lb, la, 1e-12 * std::abs(la)) << "capacity " << capacity_drop;
    std::vector<double> ga(size_t(a.table().total)), gb(ga.size());
    be1->copy_to_host(ga.data(), a.grads());
    be2.copy_to_host(gb.data(), b.grads());
    double scale = 0;
    for (double v : ga) scale = std::max(scale, std::abs(v));
    ASSERT_GT(scale, 0);
    for (size_t i = 0; i < ga.size(); ++i)
      ASSERT_NEAR(gb[i], ga[i], 1e-12 * scale) << "capacity " << capacity_drop << " element " << i;
  }
}

// Under precision.quantize: experts every treatment holds exactly the expert linears quantized
// (the router, attention and norms stay plain) and its optimizer moves them: a few steps on a
// fixed batch lower the loss.
TEST(MoeModel, EveryTreatmentTrainsTheQuantizedExpertLinears) {
  ModelConfig cfg = tiny_moe(eco::ModelFamily::Gpt2, MoeRouter::TopkSoftmax);
  cfg.d_model = 32;
  cfg.n_head = 2;
  cfg.moe.expert_hidden = 32;
  cfg.moe.n_shared_experts = 1;
  eco::OptimConfig o;
  o.lr = 3e-3;
  o.schedule = eco::LrSchedule::Constant;
  for (const std::string& name : eco::treatment_names()) {
    auto be = eco::make_cpu_backend();
    const eco::Treatment t = eco::treatment_from_name(name);
    eco::Transformer model(cfg, *be, 2, t, eco::QuantizeScope::Experts);
    eco::Optimizer opt(o, model, 1);
    model.init_weights(1);
    for (size_t i = 0; i < model.table().specs.size(); ++i) {
      const bool expert = model.table().specs[i].role == eco::ParamRole::Expert;
      EXPECT_EQ(model.store().quantized(i), expert && t.quantized)
          << name << " " << model.table().specs[i].name;
    }
    std::vector<int32_t> in(10), tgt(10);
    for (int i = 0; i < 10; ++i) in[size_t(i)] = i, tgt[size_t(i)] = (3 * i + 1) % 11;
    double first = 0, last = 0;
    for (int s = 0; s < 20; ++s) {
      model.zero_grad();
      const double l = model.forward_backward(in.data(), tgt.data(), 2, 5, 1.0f);
      if (s == 0) first = l;
      last = l;
      opt.step(o.lr, opt.grad_norm());
      model.after_optimizer_step();
    }
    EXPECT_TRUE(std::isfinite(last)) << name;
    EXPECT_LT(last, first) << name;
  }
}

}  // namespace
