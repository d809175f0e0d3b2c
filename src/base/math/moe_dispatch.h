// The MoE dispatch's counting sort on the host (kernels/cpu/moe.h has the layout): the CPU
// reference, and the CUDA backend's path when a capacity drops tokens (the dropless sort runs on
// the GPU, kernels/cuda/moe.cuh).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/math/moe_stats.h"

namespace eco {

// Counting sort of the N k slots by expert (histogram, scan, scatter), stable in slot order.
// An expert routed more than `capacity` slots keeps the `capacity` of the highest gates (equal
// gates: the lower slot), still in slot order; the rest get row -1. Segments start on multiples
// of `align` rows; padding rows get token -1. token_of_row: moe_max_rows(N k, E, align) entries.
template <class T>
MoeDispatch moe_dispatch_host(int32_t* row_of_slot, int32_t* token_of_row, const int32_t* idx,
                              const T* gates, int N, int E, int k, int64_t capacity, int align) {
  const int64_t S = int64_t(N) * k;
  MoeDispatch d;
  d.routed.assign(size_t(E), 0);
  for (int64_t s = 0; s < S; ++s) ++d.routed[size_t(idx[s])];  // histogram
  // Which slots each over-full expert keeps: its `capacity` highest gates (ties: lower slot).
  std::vector<char> keep(size_t(S), 1);
  for (int e = 0; e < E; ++e) {
    if (d.routed[size_t(e)] <= capacity) continue;
    std::vector<int64_t> mine;
    for (int64_t s = 0; s < S; ++s)
      if (idx[s] == e) mine.push_back(s);
    std::stable_sort(mine.begin(), mine.end(),
                     [&](int64_t a, int64_t b) { return gates[a] > gates[b]; });
    for (size_t i = size_t(capacity); i < mine.size(); ++i) keep[size_t(mine[i])] = 0;
  }
  // Segment starts: the exclusive scan of the counts, each rounded up to the alignment.
  d.counts.resize(size_t(E));
  d.offsets.resize(size_t(E));
  int64_t end = 0;
  for (int e = 0; e < E; ++e) {
    const int64_t n = std::min(d.routed[size_t(e)], capacity);
    d.counts[size_t(e)] = n;
    d.offsets[size_t(e)] = end;
    std::fill(token_of_row + end + n, token_of_row + end + (n + align - 1) / align * align, -1);
    end += (n + align - 1) / align * align;
    d.kept += n;
  }
  d.rows = end;
  // The scatter in slot order (stable).
  std::vector<int64_t> next = d.offsets;
  for (int64_t s = 0; s < S; ++s) {
    if (!keep[size_t(s)]) {
      row_of_slot[s] = -1;
      continue;
    }
    const int64_t row = next[size_t(idx[s])]++;
    row_of_slot[s] = int32_t(row);
    token_of_row[row] = int32_t(s / k);
  }
  d.dropped = S - d.kept;
  return d;
}

}  // namespace eco
