// The shapes the tensor-core attention (kernels/cuda/attention_mma.cuh) takes, in plain C++ with
// no dependencies: attention_mma.cu checks calls with it, and the CPU side (the planning backend,
// the unit tests) uses it without CUDA. nvcc compiles it too, so it includes nothing that uses
// fmt.
#pragma once

#include "base/math/attention_shape.h"

namespace eco {

// Head size 32, 64, 128 or 256 (the compiled templates), B <= 65535 and T <= 65535 tiles of
// kMmaAttentionRows rows (grid y and z), NH a multiple of KVH >= 1 (NH <= 65535), window >= 0,
// q_scalar > 0. The 16-byte alignment of the buffers is checked per call.
constexpr int kMmaAttentionRows = 64;
inline bool attention_mma_shape_ok(int B, int T, const AttentionShape& a) {
  if (B < 1 || T < 1 || B > 65535 || T > 65535 * kMmaAttentionRows || a.NH < 1 || a.KVH < 1 ||
      a.NH > 65535 || a.NH % a.KVH != 0 || a.window < 0 || !(a.q_scalar > 0))
    return false;
  return a.hd == 32 || a.hd == 64 || a.hd == 128 || a.hd == 256;
}
// Plain multi-head attention over C = NH hs.
inline bool attention_mma_shape_ok(int B, int T, int C, int NH) {
  return NH >= 1 && C >= NH && C % NH == 0 &&
         attention_mma_shape_ok(B, T, AttentionShape::multi_head(NH, C / NH));
}

}  // namespace eco
