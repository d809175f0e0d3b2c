// eco-gemm-bench: throughput of GemmEngine's GEMMs on the current GPU at the GPT-2 124M linear
// shapes (N = 4096 tokens; the head unpadded and padded) and 8192^3, against the H200 peaks (bf16 ~790 TFLOP/s measured, fp8
// 1979 TFLOP/s dense by datasheet, HBM ~4.3 TB/s measured).
// Timing: CUDA events around each call, median of `reps` (default 20) after 3 warm-up calls
// (the first creates the plan); the operands rotate through enough copies to exceed twice the L2
// (60 MB on H200), so every timed call reads them from HBM. Random data (not zeros: the power
// draw, hence the clocks, depends on the bits).
// Then causal attention at GPT-2 124M's shape (B 8, T 1024, NH 12, hs 64), forward and backward
// on each CUDA path (cuBLASLt GEMMs, the flash kernel, the mma.sync kernels), timed the same way
// over 4 rotating input sets, with each path's out and gradient against the GEMM path's (relative
// norm of the difference; NaN shows as inf) so that the numbers come with a sanity check.
// Usage: eco-gemm-bench [reps]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <vector>

#include "core/rel_err.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_gemm.cuh"
#include "kernels/cuda/attention_mma.cuh"
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

// Median time (us) of `call(set)` over reps, rotating through `sets` input sets, after 3 warm-up
// calls (the first creates a GEMM's plan).
float time_rotating(const std::function<void(int)>& call, int sets, int reps) {
  for (int i = 0; i < 3; ++i) call(i % sets);
  ECO_CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(size_t(2 * reps));
  for (auto& e : ev) ECO_CHECK_CUDA(cudaEventCreate(&e));
  for (int r = 0; r < reps; ++r) {
    ECO_CHECK_CUDA(cudaEventRecord(ev[size_t(2 * r)]));
    call(r % sets);
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
  return time_rotating([&](int i) { call(ops[size_t(i)]); }, sets, reps);
}

// ---- attention ----------------------------------------------------------------------------------

std::vector<float> bf16_to_host(const DeviceBuffer& d) {
  std::vector<uint16_t> bits(d.bytes() / 2);
  ECO_CHECK_CUDA(cudaMemcpy(bits.data(), d.get(), d.bytes(), cudaMemcpyDeviceToHost));
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint32_t u = uint32_t(bits[i]) << 16;
    std::memcpy(&v[i], &u, sizeof u);
  }
  return v;
}


enum class AttnPath { Gemm, Flash, Mma };
const char* attn_path_name(AttnPath p) {
  switch (p) {
    case AttnPath::Gemm: return "gemm (cuBLASLt)";
    case AttnPath::Flash: return "flash (CUDA cores)";
    case AttnPath::Mma: return "mma (mma.sync)";
  }
  return "?";
}

// One attention input set: qkv, dout (random), the forward's out and lse.
struct AttnSet {
  DeviceBuffer qkv, dout, out, lse;
};

// Forward and backward of every path at GPT-2 124M's attention shape; one markdown row each.
void bench_attention(GemmEngine& engine, int reps) {
  constexpr int B = 8, T = 1024, NH = 12, hs = 64, C = NH * hs, kSets = 4;
  const int64_t n_qkv = int64_t(B) * T * 3 * C, n_out = int64_t(B) * T * C;
  const int64_t n_lse = int64_t(B) * NH * T;
  std::vector<AttnSet> sets(kSets);
  for (int i = 0; i < kSets; ++i) {
    AttnSet& a = sets[size_t(i)];
    a.qkv = DeviceBuffer(size_t(n_qkv) * 2);
    a.dout = DeviceBuffer(size_t(n_out) * 2);
    a.out = DeviceBuffer(size_t(n_out) * 2);
    a.lse = DeviceBuffer(size_t(n_lse) * 4);
    fill_bf16<<<1024, 256>>>(a.qkv.get<__nv_bfloat16>(), n_qkv, 100u + 2u * i);
    fill_bf16<<<1024, 256>>>(a.dout.get<__nv_bfloat16>(), n_out, 101u + 2u * i);
    ECO_CHECK_LAUNCH();
  }
  DeviceBuffer dqkv(size_t(n_qkv) * 2), D(size_t(n_lse) * 4);
  const size_t scratch_bytes = eco::cuda::attention_gemm_scratch_bytes(T, NH);
  DeviceBuffer scratch(scratch_bytes);
  using bf = __nv_bfloat16;
  const auto forward = [&](AttnPath p, AttnSet& a) {
    bf* out = a.out.get<bf>();
    float* lse = a.lse.get<float>();
    const bf* qkv = a.qkv.get<bf>();
    switch (p) {
      case AttnPath::Gemm:
        eco::cuda::attention_gemm_forward(engine, out, lse, qkv, scratch.get(), scratch_bytes, B,
                                          T, C, NH);
        break;
      case AttnPath::Flash:
        ECO_CHECK_CUDA(eco::cuda::attention_forward(out, lse, qkv, B, T, C, NH));
        break;
      case AttnPath::Mma:
        eco::cuda::attention_mma_forward(out, lse, qkv, B, T, C, NH);
        break;
    }
  };
  const auto backward = [&](AttnPath p, AttnSet& a) {
    bf* g = dqkv.get<bf>();
    const bf *dout = a.dout.get<bf>(), *qkv = a.qkv.get<bf>(), *out = a.out.get<bf>();
    const float* lse = a.lse.get<float>();
    switch (p) {
      case AttnPath::Gemm:
        eco::cuda::attention_gemm_backward(engine, g, D.get<float>(), scratch.get(), scratch_bytes,
                                           dout, qkv, out, lse, B, T, C, NH);
        break;
      case AttnPath::Flash:
        ECO_CHECK_CUDA(eco::cuda::attention_backward(g, D.get<float>(), dout, qkv, out, lse, B, T,
                                                     C, NH));
        break;
      case AttnPath::Mma:
        eco::cuda::attention_mma_backward(g, D.get<float>(), dout, qkv, out, lse, B, T, C, NH);
        break;
    }
  };

  // Causal work: forward 2 products, backward 5, each over half of the (T, T) scores.
  const double fwd_flops = 2.0 * 2.0 * B * NH * double(T) * T * hs / 2;
  const double bwd_flops = 2.5 * fwd_flops;
  std::printf("\n| attention B %d T %d NH %d hs %d | fwd (ms) | bwd (ms) | fwd TFLOP/s | "
              "bwd TFLOP/s | out vs gemm | dqkv vs gemm |\n",
              B, T, NH, hs);
  std::printf("|------------------------------------|----------|----------|-------------|"
              "-------------|-------------|--------------|\n");
  std::vector<float> ref_out, ref_grad;
  for (AttnPath p : {AttnPath::Gemm, AttnPath::Flash, AttnPath::Mma}) {
    try {
      // One untimed forward + backward into a zeroed dqkv on set 0: the comparison.
      ECO_CHECK_CUDA(cudaMemset(dqkv.get(), 0, dqkv.bytes()));
      forward(p, sets[0]);
      backward(p, sets[0]);
      ECO_CHECK_CUDA(cudaDeviceSynchronize());
      const std::vector<float> out = bf16_to_host(sets[0].out), grad = bf16_to_host(dqkv);
      if (p == AttnPath::Gemm) ref_out = out, ref_grad = grad;
      const double out_diff = eco::rel_err(out, ref_out);
      const double grad_diff = eco::rel_err(grad, ref_grad);
      // Timed: the forward over the sets (refreshing each set's out and lse), then the backward
      // (accumulating into dqkv: the values grow by one gradient per call, harmlessly).
      const float fwd_us = time_rotating([&](int i) { forward(p, sets[size_t(i)]); }, kSets, reps);
      const float bwd_us = time_rotating([&](int i) { backward(p, sets[size_t(i)]); }, kSets, reps);
      std::printf("| %-34s | %8.3f | %8.3f | %11.1f | %11.1f | %11.2e | %12.2e |\n",
                  attn_path_name(p), fwd_us / 1000, bwd_us / 1000, fwd_flops / (fwd_us * 1e6),
                  bwd_flops / (bwd_us * 1e6), out_diff, grad_diff);
    } catch (const std::exception& e) {  // report it in the table and carry on
      std::printf("| %-34s | failed: %s\n", attn_path_name(p), e.what());
      cudaDeviceSynchronize();
      cudaGetLastError();
    }
  }
  std::printf("attention floors at this shape: fwd %.3f ms, bwd %.3f ms (causal FLOPs at the bf16 "
              "peak)\n",
              fwd_flops / kPeakBf16 * 1e3, bwd_flops / kPeakBf16 * 1e3);
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
    // (what the CUDA backend runs, see Backend::logits_stride): bf16 only (FP8 needs multiples of
    // 16).
    const Shape shapes[] = {{"gpt2 qkv", 4096, 768, 2304},
                            {"gpt2 attn proj", 4096, 768, 768},
                            {"gpt2 fc", 4096, 768, 3072},
                            {"gpt2 fc proj", 4096, 3072, 768},
                            {"head V 50257", 4096, 768, 50257},
                            {"head Vp 50304", 4096, 768, 50304},
                            {"square 8192", 8192, 8192, 8192}};
    const Kind kinds[] = {Kind::Bf16Fwd, Kind::Fp8RowFwd, Kind::Fp8TensorFwd, Kind::Bf16Dinp,
                          Kind::Bf16Dweight};
    // Markdown rows (scripts/dev/gpu_check.sh collects the lines starting with '|').
    std::printf("| %-14s | %-23s | %5s | %5s | %5s | %9s | %8s | %6s | %10s |\n", "shape", "gemm",
                "N", "C", "OC", "time (us)", "TFLOP/s", "% peak", "floor (us)");
    std::printf("|----------------|-------------------------|-------|-------|-------|-----------|"
                "----------|--------|------------|\n");
    for (const Shape& s : shapes)
      for (Kind k : kinds) {
        if (is_fp8(k) && cc < 89) continue;  // sm_89 runs row scales by the engine's own route
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
    bench_attention(engine, reps);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eco-gemm-bench: %s\n", e.what());
    return 1;
  }
}
