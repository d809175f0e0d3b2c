// What an MoE layer under expert parallelism (model/expert_parallel.h) asks of the other ranks,
// declared on the model's side, implemented by the run's parallelism (dist/expert_collectives.h):
// its segment sizes shared with the expert-parallel group, its tokens' rows exchanged with it,
// and, once at construction, where its experts' gradients accumulate, for the fold over the world
// after the step's backward. The model issues no collective itself.
#pragma once
#include <cstdint>
#include <vector>

#include "base/backend.h"

namespace eco {

// One MoE layer's experts' gradients under expert parallelism: `sources` (n_sources, local, span)
// holds each source rank's gradient of each of the `local` experts of this rank (n_sources =
// ep, or 1: one running sum over the sources, in order: ExpertParallel::keep_sources), each a
// span of `span` elements; `grads` the local experts' spans of the flat gradient, which the fold
// overwrites with the world's sum. The fold zeroes `sources` for the next step.
struct ExpertGradients {
  Tensor sources;
  int64_t n_sources = 1, local = 0, span = 0;
  std::vector<Tensor> grads;  // (local) views of the flat gradient, `span` elements each
};

class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  // all (ep x n) = every rank of the expert-parallel group's `mine` (n), in group rank order.
  virtual void gather_counts(int64_t* all, const int64_t* mine, int64_t n) = 0;
  // The token exchange in the expert-parallel group: rows of `width` values (from's dtype), block
  // d of `from` (from_rows[d] rows, packed in rank order) to group rank d; `to` receives block s
  // (to_rows[s] rows) from rank s, packed in rank order. Every rank calls it with counts that
  // agree pairwise (gather_counts first). On return `to` holds the rows on the backend's stream.
  virtual void exchange_rows(const Tensor& from, const std::vector<int64_t>& from_rows,
                             const Tensor& to, const std::vector<int64_t>& to_rows, int width) = 0;
  // A layer's experts' gradients, given once when the layer is built (layers in order); the fold
  // after the step's backward reads them.
  virtual void add_expert_gradients(ExpertGradients layer) = 0;
};

}  // namespace eco
