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

// The counting sort's histogram before and after capacity, and where each expert's rows start.
// Each expert's segment begins on a multiple of the backend's row alignment (1 on the CPU; 16 on
// CUDA, where the FP8 GEMM needs whole 16-row tiles): the `align - 1` or fewer rows after a
// segment are padding, whose token_of_row is -1 (gathered as zeros, never combined).
struct MoeDispatch {
  std::vector<int64_t> routed;   // (E) slots that chose each expert
  std::vector<int64_t> counts;   // (E) rows each expert keeps (routed, capped at the capacity)
  std::vector<int64_t> offsets;  // (E) the first row of each expert's segment
  int64_t rows = 0;              // rows in use, padding included (the last segment's end)
  int64_t kept = 0;              // sum of counts (rows that hold a token)
  int64_t dropped = 0;           // slots over capacity (sum of routed - counts)
};

// The rows a dispatch of S slots over E experts may use with segments aligned to `align` rows.
inline int64_t moe_max_rows(int64_t slots, int64_t E, int align) {
  return slots + E * int64_t(align - 1);
}

}  // namespace eco
