// The MoE router's math (src/base/math/moe_router.h through kernels/cpu/moe.h) in float64:
// top-k ties, gates of each mode, and the backward of each mode, of the aux (load-balance) loss
// and of the z-loss against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "kernels/cpu/moe.h"

namespace {

using eco::MoeRouter;

TEST(MoeTopk, EqualScoresGoToTheLowerExpertIdFirst) {
  const std::vector<double> z = {0.5, 2.0, 2.0, 0.5, 2.0};
  int32_t idx[4];
  eco::moe_topk(idx, 5, 4, [&](int e) { return z[size_t(e)]; });
  EXPECT_EQ(idx[0], 1);
  EXPECT_EQ(idx[1], 2);
  EXPECT_EQ(idx[2], 4);
  EXPECT_EQ(idx[3], 0);
}

TEST(MoeRoute, TopkSoftmaxGatesAreTheSoftmaxOfTheSelectedLogits) {
  const std::vector<double> z = {1.0, 3.0, -1.0, 2.0};
  int32_t idx[2];
  double g[2], p[4];
  eco::moe_route_token(idx, g, p, z.data(), static_cast<const double*>(nullptr), 4, 2,
                       MoeRouter::TopkSoftmax, false);
  EXPECT_EQ(idx[0], 1);
  EXPECT_EQ(idx[1], 3);
  EXPECT_NEAR(g[0], std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), 1e-15);
  EXPECT_NEAR(g[0] + g[1], 1.0, 1e-15);
}

TEST(MoeRoute, SoftmaxTopkGatesAreProbabilitiesUnlessRenormalised) {
  const std::vector<double> z = {1.0, 3.0, -1.0, 2.0};
  int32_t idx[2];
  double g[2], p[4];
  eco::moe_route_token(idx, g, p, z.data(), static_cast<const double*>(nullptr), 4, 2,
                       MoeRouter::SoftmaxTopk, false);
  EXPECT_EQ(g[0], p[1]);
  EXPECT_EQ(g[1], p[3]);
  eco::moe_route_token(idx, g, p, z.data(), static_cast<const double*>(nullptr), 4, 2,
                       MoeRouter::SoftmaxTopk, true);
  EXPECT_NEAR(g[0] + g[1], 1.0, 1e-15);
}

TEST(MoeRoute, SigmoidBiasSelectsWithTheBiasButGatesWithoutIt) {
  const std::vector<double> z = {1.0, 3.0, -1.0, 2.0}, b = {0.0, 0.0, 5.0, 0.0};
  int32_t idx[2];
  double g[2], p[4];
  eco::moe_route_token(idx, g, p, z.data(), b.data(), 4, 2, MoeRouter::SigmoidBias, false);
  EXPECT_EQ(idx[0], 2);  // sigmoid(-1) + 5 beats every other score
  EXPECT_EQ(idx[1], 1);
  const double s2 = 1 / (1 + std::exp(1.0)), s1 = 1 / (1 + std::exp(-3.0));
  EXPECT_NEAR(g[0], s2 / (s1 + s2), 1e-15);
}

// L(z) = sum_{t,j} G_{t,j} g_{t,j} + aux + z-loss over N tokens, with the expert loads n_i of
// the unperturbed routing held constant (as the aux loss treats them), checked against the
// analytic dL/dz for every logit. h = 1e-6 in float64: the error is ~1e-10 relative, far
// below the 1e-6 tolerance; the logits are spread (std 2) so no perturbation flips a choice.
void check_router(MoeRouter mode, bool norm_topk, double aux_c, double z_c) {
  const int N = 7, E = 6, k = 3;
  eco::Rng rng(11);
  std::vector<double> z(N * E), G(N * k), bias(E, 0.0);
  for (auto& v : z) v = 2.0 * rng.normal();
  for (auto& v : G) v = rng.normal();
  for (auto& v : bias) v = 0.1 * rng.normal();
  std::vector<int32_t> idx(N * k);
  std::vector<double> g(N * k), p(N * E), lse(N);
  auto route = [&](const std::vector<double>& zz) {
    eco::cpu::moe_route(idx.data(), g.data(), p.data(), lse.data(), zz.data(), bias.data(), N,
                        E, k, mode, norm_topk);
  };
  route(z);
  std::vector<double> n(E, 0.0);
  for (int32_t e : idx) n[size_t(e)] += 1;
  const std::vector<int32_t> idx0 = idx;
  auto loss = [&](const std::vector<double>& zz) {
    route(zz);
    EXPECT_EQ(idx, idx0) << "a perturbation changed the routing";
    double L = 0;
    for (int s = 0; s < N * k; ++s) L += G[size_t(s)] * g[size_t(s)];
    const eco::MoeRouterSums sums = eco::cpu::moe_router_sums(p.data(), lse.data(), N, E);
    for (int e = 0; e < E; ++e)
      L += aux_c * E * (n[size_t(e)] / (N * k)) * (sums.prob_sums[size_t(e)] / N);
    return L + z_c * sums.lse_sq_sum / N;
  };
  route(z);
  std::vector<double> aux_w;
  if (aux_c > 0)
    for (int e = 0; e < E; ++e) aux_w.push_back(aux_c * E * n[size_t(e)] / (double(k) * N * N));
  std::vector<double> dz(N * E, 0.0);
  eco::cpu::moe_router_backward(dz.data(), G.data(), idx.data(), g.data(), p.data(), z.data(),
                                lse.data(), aux_w, 2.0 * z_c / N, N, E, k, mode, norm_topk);
  const double h = 1e-6;
  for (size_t i = 0; i < z.size(); ++i) {
    std::vector<double> zp = z, zm = z;
    zp[i] += h;
    zm[i] -= h;
    const double fd = (loss(zp) - loss(zm)) / (2 * h);
    EXPECT_NEAR(dz[i], fd, 1e-6 * std::max(1.0, std::abs(fd)))
        << int(mode) << " logit " << i;
  }
}

TEST(MoeRouterGradcheck, TopkSoftmaxMatchesFiniteDifferences) {
  check_router(MoeRouter::TopkSoftmax, false, 0, 0);
}
TEST(MoeRouterGradcheck, SoftmaxTopkMatchesFiniteDifferences) {
  check_router(MoeRouter::SoftmaxTopk, false, 0, 0);
}
TEST(MoeRouterGradcheck, SoftmaxTopkRenormalisedMatchesFiniteDifferences) {
  check_router(MoeRouter::SoftmaxTopk, true, 0, 0);
}
TEST(MoeRouterGradcheck, SigmoidBiasMatchesFiniteDifferences) {
  check_router(MoeRouter::SigmoidBias, false, 0, 0);
}
TEST(MoeRouterGradcheck, AuxLossMatchesFiniteDifferences) {
  check_router(MoeRouter::TopkSoftmax, false, 0.5, 0);
}
TEST(MoeRouterGradcheck, ZLossMatchesFiniteDifferences) {
  check_router(MoeRouter::SoftmaxTopk, false, 0, 0.3);
}
TEST(MoeRouterGradcheck, AllTermsTogetherMatchFiniteDifferences) {
  check_router(MoeRouter::SoftmaxTopk, true, 0.2, 0.1);
  check_router(MoeRouter::SigmoidBias, false, 0.2, 0.1);
}

}  // namespace
