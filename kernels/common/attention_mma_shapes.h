// The shapes the tensor-core attention (kernels/cuda/attention_mma.cuh) takes, in plain C++ with
// no dependencies: attention_mma.cu checks calls with it, and the CPU side (the planning backend,
// the unit tests) uses it without CUDA. nvcc compiles it too, so it includes nothing that uses
// fmt.
#pragma once

namespace eco {

// Head size C / NH of 32, 64 or 128 (the compiled templates), B <= 65535 and T <= 65535 tiles of
// kMmaAttentionRows rows (grid y and z). The 16-byte alignment of the buffers is checked per call.
constexpr int kMmaAttentionRows = 64;
inline bool attention_mma_shape_ok(int B, int T, int C, int NH) {
  if (B < 1 || T < 1 || NH < 1 || B > 65535 || T > 65535 * kMmaAttentionRows || C < NH ||
      C % NH != 0)
    return false;
  const int hs = C / NH;
  return hs == 32 || hs == 64 || hs == 128;
}

}  // namespace eco
