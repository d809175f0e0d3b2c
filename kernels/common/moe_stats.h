// What the MoE routing hands back to the host once per layer and forward (both backends): the
// router's sums over tokens and the dispatch's histogram, which sizes the expert GEMMs.
#pragma once
#include <cstdint>
#include <vector>

namespace eco {

// Summed over tokens in token order, in double (the same inputs give the same sums): the aux
// loss's P_i * N, the z-loss's sum of lse^2 and the router-entropy metric's sum.
struct MoeRouterSums {
  std::vector<double> prob_sums;  // (E) sum over tokens of softmax(z_t)_e
  double lse_sq_sum = 0, entropy_sum = 0;
};

// The counting sort's histogram before and after capacity.
struct MoeDispatch {
  std::vector<int64_t> routed;  // (E) slots that chose each expert
  std::vector<int64_t> counts;  // (E) rows each expert keeps (routed, capped at the capacity)
  int64_t rows = 0;             // R = sum of counts
  int64_t dropped = 0;          // slots over capacity (sum of routed - counts)
};

}  // namespace eco
