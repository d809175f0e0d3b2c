// The shape of a causal self-attention call (grouped-query, optionally sliding-window, with a
// query scale) and the key range each query sees: the CPU reference (kernels/cpu/attention.cpp)
// and every CUDA attention path (kernels/cuda/attention*.cu) read the window from here, so that
// both backends mask exactly the same keys.
#pragma once
#include <cstdint>

#include "base/math/hd.h"

namespace eco {

// The largest head size the CUDA attention takes (the flash kernel and the mma path's largest
// instantiation; kernels/cuda/attention.cuh): the config check of a cuda run names it.
constexpr int kCudaAttentionMaxHeadSize = 256;

// qkv rows hold [q (NH heads) | k (KVH heads) | v (KVH heads)], each head hd wide: QKV = (NH + 2
// KVH) hd; the output rows are NH hd wide. Query head h reads key/value head h / (NH / KVH).
// window > 0: query t sees keys (t - window, t]; 0: all of [0, t]. Scores are scaled by
// q_scalar^-1/2.
struct AttentionShape {
  int NH = 0, KVH = 0, hd = 0;
  int window = 0;
  float q_scalar = 0;
  ECO_HD int group() const { return NH / KVH; }
  ECO_HD int64_t qkv_width() const { return int64_t(NH + 2 * KVH) * hd; }
  ECO_HD int64_t out_width() const { return int64_t(NH) * hd; }
  // Column of query head h, key head g and value head g within a qkv row.
  ECO_HD int64_t q_col(int h) const { return int64_t(h) * hd; }
  ECO_HD int64_t k_col(int g) const { return int64_t(NH + g) * hd; }
  ECO_HD int64_t v_col(int g) const { return int64_t(NH + KVH + g) * hd; }
  // Plain multi-head attention: what attention_forward(..., C, NH) computes with C = NH hd.
  bool plain() const { return KVH == NH && window == 0 && q_scalar == float(hd); }
  // The shape of plain multi-head attention over C = NH hs.
  static AttentionShape multi_head(int NH, int hs) { return {NH, NH, hs, 0, float(hs)}; }
};

// The first key query t sees: t - window + 1 (clamped at 0) in a window, else 0.
ECO_HD int attention_first_key(int t, int window) {
  return window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;
}
// One past the last query (of T) that sees key j: j + window in a window (clamped at T), else T.
ECO_HD int attention_query_end(int j, int window, int T) {
  return window > 0 && int64_t(j) + window < T ? j + window : T;
}
// Whether query t sees key j (causal, within the window).
ECO_HD bool attention_sees(int t, int j, int window) {
  return j <= t && (window <= 0 || t - j < window);
}

}  // namespace eco
