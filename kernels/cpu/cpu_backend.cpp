// make_cpu_backend: the CPU reference backend (cpu_backend.h) in fp32 or fp64.
#include "kernels/cpu/cpu_backend.h"

#include "kernels/cpu/quantized_update_simd.h"

namespace eco {

std::unique_ptr<Backend> make_cpu_backend(DType dtype) {
  cpu_simd::active_isa();  // a bad ECO_CPU_SIMD is refused here, before any work
  if (dtype == DType::F64) return std::make_unique<CpuBackend<double>>();
  if (dtype == DType::F32) return std::make_unique<CpuBackend<float>>();
  runtime_error("the CPU backend supports f32 and f64, not {}", dtype_name(dtype));
}

}  // namespace eco
