// The shape of an attention test call (B sequences of T tokens, NH query heads of size hs, and
// for grouped-query / windowed attention KVH key/value heads, a window and a query scalar) and
// the sizes of its buffers: shared by the GPU tests (test_attention_gpu.cu) and the emulated ones
// (tests/emu/attention_twin.h). Plain C++: no CUDA headers.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

#include "base/math/attention_shape.h"

struct AttnShape {
  int B, T, NH, hs;
  int KVH = 0;         // key/value heads; 0: NH (multi-head attention)
  int window = 0;      // > 0: query t sees keys (t - window, t]
  float q_scalar = 0;  // scores scaled by q_scalar^-1/2; 0: hs
  int kv_heads() const { return KVH > 0 ? KVH : NH; }
  eco::AttentionShape attention() const {
    return {NH, kv_heads(), hs, window, q_scalar > 0 ? q_scalar : float(hs)};
  }
  // Plain multi-head attention: the entry points over C = NH hs take it.
  bool plain() const { return attention().plain(); }
  int C() const { return NH * hs; }  // the output's width
  int qkv_width() const { return (NH + 2 * kv_heads()) * hs; }
  size_t n_qkv() const { return size_t(B) * T * qkv_width(); }
  size_t n_out() const { return size_t(B) * T * C(); }
  size_t n_lse() const { return size_t(B) * NH * T; }
  size_t n_att() const { return n_lse() * T; }
  std::string str() const {
    char buf[128];
    if (plain())
      std::snprintf(buf, sizeof buf, "B%d T%d NH%d hs%d", B, T, NH, hs);
    else
      std::snprintf(buf, sizeof buf, "B%d T%d NH%d KVH%d hs%d window%d q_scalar%g", B, T, NH,
                    kv_heads(), hs, window, double(attention().q_scalar));
    return buf;
  }
};
