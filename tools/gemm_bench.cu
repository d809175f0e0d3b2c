// eco-gemm-bench: throughput of GemmEngine's GEMMs on the current GPU at the GPT-2 124M linear
// shapes (N = 4096 tokens; the head unpadded and padded) and 8192^3, against the H200 peaks (bf16 ~790 TFLOP/s measured, fp8
// 1979 TFLOP/s dense by datasheet, HBM ~4.3 TB/s measured).
// Timing: CUDA events around each call, median of `reps` (default 20) after 3 warm-up calls
// (the first creates the plan); the operands rotate through enough copies to exceed twice the L2
// (60 MB on H200), so every timed call reads them from HBM. Random data (not zeros: the power
// draw, hence the clocks, depends on the bits).
// Usage: eco-gemm-bench [reps]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"

namespace {

using eco::Granularity;
using eco::cuda::DeviceBuffer;
using eco::cuda::GemmEngine;

constexpr double kPeakBf16 = 790e12, kPeakFp8 = 1979e12, kHbmBytesPerS = 4.3e12;
constexpr double kL2Bytes = 60e6;

__device__ uint32_t hash32(uint64_t i, uint32_t seed) {
  uint32_t x = uint32_t(i) * 0x9E3779B1u ^ uint32_t(i >> 32) * 0x85EBCA77u ^ seed * 0xC2B2AE3Du;
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

// bf16 uniform in [-1, 1).
__global__ void fill_bf16(__nv_bfloat16* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16_rn(float(hash32(uint64_t(i), seed)) * 4.656613e-10f - 1.0f);
}
// Random finite E4M3 codes (NaN codes 0x7F / 0xFF avoided).
__global__ void fill_e4m3(uint8_t* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t c = hash32(uint64_t(i), seed) & 0xFFu;
    if ((c & 0x7Fu) == 0x7Fu) c ^= 1u;
    x[i] = uint8_t(c);
  }
}
__global__ void fill_f32(float* x, int64_t n, float v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = v;
}

struct Shape {
  const char* name;
  int N, C, OC;
};

enum class Kind { Bf16Fwd, Fp8RowFwd, Fp8TensorFwd, Bf16Dinp, Bf16Dweight };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Bf16Fwd: return "bf16 fwd";
    case Kind::Fp8RowFwd: return "fp8 fwd (row scales)";
    case Kind::Fp8TensorFwd: return "fp8 fwd (tensor scales)";
    case Kind::Bf16Dinp: return "bf16 dinp";
    case Kind::Bf16Dweight: return "bf16 dW (f32 +=)";
  }
  return "?";
}
bool is_fp8(Kind k) { return k == Kind::Fp8RowFwd || k == Kind::Fp8TensorFwd; }

// One set of operands: A-side activations (N, C), weights (OC, C), the gradient (N, OC) for the
// backward kinds; in bf16 or e4m3 with fp32 scales.
struct OperandSet {
  DeviceBuffer act, weight, grad, act_scales, weight_scales;
};

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median time (us) of one kind at one shape.
float time_kind(GemmEngine& engine, Kind kind, const Shape& s, int reps) {
  const int64_t NC = int64_t(s.N) * s.C, OCC = int64_t(s.OC) * s.C, NOC = int64_t(s.N) * s.OC;
  const int64_t elem = is_fp8(kind) ? 1 : 2;
  const int64_t set_bytes = kind == Kind::Bf16Dweight ? (NC + NOC) * 2
                            : kind == Kind::Bf16Dinp  ? (NOC + OCC) * 2
                                                      : (NC + OCC) * elem;
  const int sets =
      int(std::min<int64_t>(16, std::max<int64_t>(1, int64_t(2 * kL2Bytes / set_bytes) + 1)));
  std::vector<OperandSet> ops(static_cast<size_t>(sets));
  for (int i = 0; i < sets; ++i) {
    OperandSet& o = ops[size_t(i)];
    o.act = DeviceBuffer(size_t(NC * elem));
    o.weight = DeviceBuffer(size_t(OCC * elem));
    if (is_fp8(kind)) {
      fill_e4m3<<<1024, 256>>>(o.act.get<uint8_t>(), NC, 2u * i + 1);
      fill_e4m3<<<1024, 256>>>(o.weight.get<uint8_t>(), OCC, 2u * i + 2);
      o.act_scales = DeviceBuffer(size_t(s.N) * 4);
      o.weight_scales = DeviceBuffer(size_t(s.OC) * 4);
      fill_f32<<<64, 256>>>(o.act_scales.get<float>(), s.N, 1.0f / 448);
      fill_f32<<<64, 256>>>(o.weight_scales.get<float>(), s.OC, 0.02f / 448);
    } else {
      fill_bf16<<<1024, 256>>>(o.act.get<__nv_bfloat16>(), NC, 2u * i + 1);
      fill_bf16<<<1024, 256>>>(o.weight.get<__nv_bfloat16>(), OCC, 2u * i + 2);
      if (kind == Kind::Bf16Dinp || kind == Kind::Bf16Dweight) {
        o.grad = DeviceBuffer(size_t(NOC) * 2);
        fill_bf16<<<1024, 256>>>(o.grad.get<__nv_bfloat16>(), NOC, 2u * i + 3);
      }
    }
    ECO_CHECK_LAUNCH();
  }
  DeviceBuffer out(size_t(kind == Kind::Bf16Dweight ? OCC * 4
                          : kind == Kind::Bf16Dinp  ? NC * 2
                                                    : NOC * 2));
  ECO_CHECK_CUDA(cudaMemset(out.get(), 0, out.bytes()));

  const auto call = [&](const OperandSet& o) {
    switch (kind) {
      case Kind::Bf16Fwd:
        engine.matmul_forward(out.get<__nv_bfloat16>(), o.act.get<__nv_bfloat16>(),
                              o.weight.get<__nv_bfloat16>(), nullptr, s.N, s.C, s.OC);
        break;
      case Kind::Fp8RowFwd:
      case Kind::Fp8TensorFwd:
        engine.matmul_forward_fp8(
            out.get<__nv_bfloat16>(), o.act.get<uint8_t>(), o.act_scales.get<float>(),
            o.weight.get<uint8_t>(), o.weight_scales.get<float>(), nullptr, s.N, s.C, s.OC,
            kind == Kind::Fp8RowFwd ? Granularity::PerRow : Granularity::PerTensor);
        break;
      case Kind::Bf16Dinp:  // dinp (N, C) = dout (N, OC) @ W (OC, C)
        engine.gemm<__nv_bfloat16, __nv_bfloat16>(
            false, false, s.N, s.C, s.OC, 1.0f, o.grad.get<__nv_bfloat16>(), s.OC,
            o.weight.get<__nv_bfloat16>(), s.C, 0.0f, out.get<__nv_bfloat16>(), s.C);
        break;
      case Kind::Bf16Dweight:  // dW (OC, C) += dout^T (OC, N) @ inp (N, C)
        engine.gemm<__nv_bfloat16, float>(
            true, false, s.OC, s.C, s.N, 1.0f, o.grad.get<__nv_bfloat16>(), s.OC,
            o.act.get<__nv_bfloat16>(), s.C, 1.0f, out.get<float>(), s.C);
        break;
    }
  };
  for (int i = 0; i < 3; ++i) call(ops[size_t(i % sets)]);
  ECO_CHECK_CUDA(cudaDeviceSynchronize());

  std::vector<cudaEvent_t> ev(size_t(2 * reps));
  for (auto& e : ev) ECO_CHECK_CUDA(cudaEventCreate(&e));
  for (int r = 0; r < reps; ++r) {
    ECO_CHECK_CUDA(cudaEventRecord(ev[size_t(2 * r)]));
    call(ops[size_t(r % sets)]);
    ECO_CHECK_CUDA(cudaEventRecord(ev[size_t(2 * r + 1)]));
  }
  ECO_CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> us(static_cast<size_t>(reps));
  for (int r = 0; r < reps; ++r) {
    float ms = 0;
    ECO_CHECK_CUDA(cudaEventElapsedTime(&ms, ev[size_t(2 * r)], ev[size_t(2 * r + 1)]));
    us[size_t(r)] = 1000.0f * ms;
  }
  for (auto& e : ev) ECO_CHECK_CUDA(cudaEventDestroy(e));
  return median(us);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
    int dev = 0;
    ECO_CHECK_CUDA(cudaGetDevice(&dev));
    cudaDeviceProp prop{};
    ECO_CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
    GemmEngine engine;
    const int cc = engine.compute_capability();
    std::printf("eco-gemm-bench: %s (sm_%d, %d SMs), median of %d after warm-up\n", prop.name, cc,
                prop.multiProcessorCount, reps);

    // The head at GPT-2's vocabulary (50257: rows off 16-byte boundaries) and padded to 50304
    // (what the CUDA backend runs, see pad_out_channels): bf16 only (FP8 needs multiples of 16).
    const Shape shapes[] = {{"gpt2 qkv", 4096, 768, 2304},
                            {"gpt2 attn proj", 4096, 768, 768},
                            {"gpt2 fc", 4096, 768, 3072},
                            {"gpt2 fc proj", 4096, 3072, 768},
                            {"head V 50257", 4096, 768, 50257},
                            {"head Vp 50304", 4096, 768, 50304},
                            {"square 8192", 8192, 8192, 8192}};
    const Kind kinds[] = {Kind::Bf16Fwd, Kind::Fp8RowFwd, Kind::Fp8TensorFwd, Kind::Bf16Dinp,
                          Kind::Bf16Dweight};
    // Markdown rows (scripts/gpu_check.sh collects the lines starting with '|').
    std::printf("| %-14s | %-23s | %5s | %5s | %5s | %9s | %8s | %6s | %10s |\n", "shape", "gemm",
                "N", "C", "OC", "time (us)", "TFLOP/s", "% peak", "floor (us)");
    std::printf("|----------------|-------------------------|-------|-------|-------|-----------|"
                "----------|--------|------------|\n");
    for (const Shape& s : shapes)
      for (Kind k : kinds) {
        if ((k == Kind::Fp8RowFwd && cc < 90) || (k == Kind::Fp8TensorFwd && cc < 89)) continue;
        if (is_fp8(k) && s.OC % 16 != 0) continue;
        const double flops = 2.0 * s.N * s.C * s.OC;
        const double peak = is_fp8(k) ? kPeakFp8 : kPeakBf16;
        const double in_elem = is_fp8(k) ? 1 : 2;
        const double bytes =
            k == Kind::Bf16Dweight ? 2.0 * s.N * (s.C + s.OC) + 8.0 * s.OC * s.C
            : k == Kind::Bf16Dinp
                ? 2.0 * (double(s.N) * s.OC + double(s.OC) * s.C + double(s.N) * s.C)
                : in_elem * (double(s.N) * s.C + double(s.OC) * s.C) + 2.0 * s.N * s.OC;
        const double floor_us = 1e6 * std::max(flops / peak, bytes / kHbmBytesPerS);
        float us = 0;
        try {
          us = time_kind(engine, k, s, reps);
        } catch (const std::exception& e) {  // report it in the table and carry on
          std::printf("| %-14s | %-23s | %5d | %5d | %5d | failed: %s\n", s.name, kind_name(k), s.N,
                      s.C, s.OC, e.what());
          ECO_CHECK_CUDA(cudaDeviceSynchronize());
          continue;
        }
        const double tflops = flops / (us * 1e-6) / 1e12;
        std::printf("| %-14s | %-23s | %5d | %5d | %5d | %9.1f | %8.1f | %5.1f%% | %10.1f |\n",
                    s.name, kind_name(k), s.N, s.C, s.OC, us, tflops, 100.0 * tflops * 1e12 / peak,
                    floor_us);
      }
    std::printf(
        "gemm peaks: bf16 %.0f TFLOP/s (measured), fp8 %.0f TFLOP/s (datasheet, dense); "
        "plans %lld, heuristic queries %lld\n",
        kPeakBf16 / 1e12, kPeakFp8 / 1e12, static_cast<long long>(engine.cached_plans()),
        static_cast<long long>(engine.heuristic_queries()));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eco-gemm-bench: %s\n", e.what());
    return 1;
  }
}
