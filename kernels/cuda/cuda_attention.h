// Which CUDA attention implementation runs a call: the environment variable ECO_CUDA_ATTENTION
// (read once when the CUDA backend is built) and the fallback order. Plain C++ (host only), so
// that the unit tests check it without a GPU.
#pragma once
#include <cstring>

#include "base/error.h"
#include "base/math/attention_mma_shapes.h"

namespace eco {

// Auto: the backend's default. Mma: tensor cores through mma.sync (attention_mma.cuh); Gemm:
// cuBLASLt GEMMs (attention_gemm.cuh); Flash: fp32 on CUDA cores (attention.cuh), which takes
// every shape.
enum class CudaAttention { Auto, Mma, Gemm, Flash };

// ECO_CUDA_ATTENTION's value (nullptr or "" when unset): auto, mma, gemm or flash; anything else
// is a usage error naming the value.
inline CudaAttention parse_cuda_attention(const char* value) {
  if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0)
    return CudaAttention::Auto;
  if (std::strcmp(value, "mma") == 0) return CudaAttention::Mma;
  if (std::strcmp(value, "gemm") == 0) return CudaAttention::Gemm;
  if (std::strcmp(value, "flash") == 0) return CudaAttention::Flash;
  usage_error("ECO_CUDA_ATTENTION={}: expected auto, mma, gemm or flash", value);
}

// The path a call takes given the requested one and which paths accept the call's shapes and
// buffers: the request where it applies, else the next in the order mma -> gemm -> flash.
// Auto is gemm, else flash: the mma kernel runs only on request, as its GPU tests (GpuAttentionMma)
// are not verified on a GPU; scripts/dev/gpu_check.sh prints the verdict on letting auto pick it.
inline CudaAttention choose_cuda_attention(CudaAttention requested, bool mma_ok, bool gemm_ok) {
  switch (requested) {
    case CudaAttention::Mma:
      if (mma_ok) return CudaAttention::Mma;
      [[fallthrough]];
    case CudaAttention::Auto:
    case CudaAttention::Gemm:
      if (gemm_ok) return CudaAttention::Gemm;
      [[fallthrough]];
    case CudaAttention::Flash:
      break;
  }
  return CudaAttention::Flash;
}

}  // namespace eco
