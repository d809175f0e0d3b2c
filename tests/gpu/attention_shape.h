// The shape of an attention test call (B sequences of T tokens, NH heads of size hs) and the
// sizes of its buffers: shared by the GPU tests (test_attention_gpu.cu) and the emulated ones
// (tests/emu/attention_twin.h). Plain C++: no CUDA headers.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

struct AttnShape {
  int B, T, NH, hs;
  int C() const { return NH * hs; }
  size_t n_qkv() const { return size_t(B) * T * 3 * C(); }
  size_t n_out() const { return size_t(B) * T * C(); }
  size_t n_lse() const { return size_t(B) * NH * T; }
  size_t n_att() const { return n_lse() * T; }
  std::string str() const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "B%d T%d NH%d hs%d", B, T, NH, hs);
    return buf;
  }
};
