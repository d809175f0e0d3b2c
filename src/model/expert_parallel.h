// Expert parallelism's placement (parallel.ep; docs/parallelism.md, "Expert
// parallelism"): the world is dp x ep ranks, rank r = d * ep + e. Dense parameters are replicated
// on every rank; the routed experts of every MoE layer are split over the ep ranks of an
// expert-parallel group (the ranks with the same d): rank e owns experts [e E / ep, (e + 1) E /
// ep), stores, updates and checkpoints only those, and runs every source rank's tokens through
// them (model/moe_mlp.h), reaching the other ranks through model/expert_exchange.h.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

namespace eco {

struct ExpertParallel {
  int ep = 1;    // ranks of an expert-parallel group (1: every rank holds every expert)
  int rank = 0;  // e: this rank's place in its expert-parallel group (world rank % ep)
  int dp = 1;    // expert-parallel groups (world / ep)
  int group = 0;  // d: this rank's group (world rank / ep)
  double row_factor = 0;  // parallel.ep_row_factor (0: ep)
  // Whether an owner keeps each source rank's gradient of its experts apart until the step's
  // end (MoeMlp's source accumulators, E experts' gradients a rank): needed when the fold over
  // the world has other sources between them (dp > 1) or a source sums micro-batches first
  // (grad_accum > 1). Otherwise (dp 1, one micro-batch) the sources arrive in fold order and one
  // running sum of the local experts does.
  bool keep_sources = true;

  // The rows this rank's experts can take in a layer when one source sends at most `rows`:
  // row_factor x rows (ep x rows by default, the worst case), rounded up to whole 16-row tiles.
  int64_t expert_rows(int64_t rows) const {
    const double f = row_factor > 0 ? row_factor : double(ep);
    const auto n = int64_t(f * double(rows) + 0.999999);
    return std::min<int64_t>(int64_t(ep) * rows, (n + 15) / 16 * 16);
  }

  bool enabled() const { return ep > 1; }
  // The group rank that owns expert x of n_experts (ep divides n_experts: config.cpp).
  int owner(int x, int n_experts) const { return x / (n_experts / ep); }
  bool owns(int x, int n_experts) const { return owner(x, n_experts) == rank; }
};

// The placement of world rank `world_rank` of dp x ep ranks.
// grad_accum: the run's micro-batches a step (keep_sources).
inline ExpertParallel expert_placement(int dp, int ep, int world_rank, double row_factor = 0,
                                       int grad_accum = 1) {
  ExpertParallel p;
  p.ep = ep;
  p.rank = world_rank % ep;
  p.dp = dp;
  p.group = world_rank / ep;
  p.row_factor = row_factor;
  p.keep_sources = dp > 1 || grad_accum > 1;
  return p;
}

// The routed expert a parameter belongs to: "h.3.mlp.experts.5.fc.weight" -> 5; -1 for every
// other parameter (dense, router, shared experts).
int routed_expert_of(const std::string& name);
// The same parameter of routed expert y: "h.3.mlp.experts.5.fc.weight", 7 -> "h.3.mlp.experts.7.fc.weight".
std::string with_routed_expert(const std::string& name, int y);

}  // namespace eco
