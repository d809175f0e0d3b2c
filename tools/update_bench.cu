// eco-update-bench: bandwidth of the fused quantized-weight update (kernels/cuda/
// optimizer_update.cuh) against a device-to-device copy measured in the same run.
// Bytes: per element of an fp32-state ECO AdamW E4M3 weight the update must read grad (4 B),
// m (4), v (4), the code (1) and write m, v and the code (9): 22 B, plus 8 B per row for the
// scale. Pass 2's re-reads of m, v and the codes are meant to hit L2 (two rows in flight per SM)
// and are not counted. Arithmetic: pass 1 and pass 2 each evaluate theta (IEEE divisions and a
// sqrt, as the CPU does, for bit-identity), pass 2 adds the FP8 codec and under SR a
// Philox-4x32-10 draw: ~300 instructions per element (SASS of sm_90a), about as long as the bytes
// take at 4.3 TB/s, so the table also shows RTN, bf16 state and SGDM to tell the two limits apart.
// Reported: the median of 20 timed launches (CUDA events) after 3 warm-ups, as GB/s and as a
// fraction of the copy's GB/s (bytes read + written), the target being >= 70%.
// Usage: eco-update-bench [rows cols]   (default 8192 8192)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <type_traits>
#include <vector>

#include "kernels/common/eco_update.h"
#include "kernels/common/format_quantizer.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/optimizer_update.cuh"
#include "kernels/cuda/quantize.cuh"

namespace eco::cuda {
namespace {

constexpr int kWarmup = 3, kRepeats = 20;

// Deterministic pseudo-random fill: x[i] = lo + (hi - lo) * u(i), u from a 32-bit hash.
__global__ void fill_uniform(float* x, int64_t n, uint32_t seed, float lo, float hi) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t h = uint32_t(i) * 0x9E3779B9u ^ uint32_t(i >> 32) ^ seed;
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  x[i] = lo + (hi - lo) * float(h >> 8) * 0x1.0p-24f;
}

__global__ void to_bf16_bits(uint16_t* dst, const float* src, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = float_to_bf16(src[i]);
}

void fill(float* x, int64_t n, uint32_t seed, float lo, float hi) {
  fill_uniform<<<unsigned((n + 255) / 256), 256>>>(x, n, seed, lo, hi);
  ECO_CHECK_LAUNCH();
}

// Median milliseconds of `run` over kRepeats launches, each timed alone, after kWarmup.
template <class F>
float median_ms(F&& run) {
  cudaEvent_t start, stop;
  ECO_CHECK_CUDA(cudaEventCreate(&start));
  ECO_CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < kWarmup; ++i) run();
  std::vector<float> ms(kRepeats);
  for (auto& t : ms) {
    ECO_CHECK_CUDA(cudaEventRecord(start));
    run();
    ECO_CHECK_CUDA(cudaEventRecord(stop));
    ECO_CHECK_CUDA(cudaEventSynchronize(stop));
    ECO_CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
  }
  ECO_CHECK_CUDA(cudaEventDestroy(start));
  ECO_CHECK_CUDA(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[kRepeats / 2];
}

struct Row {
  const char* name;
  double ms, bytes;
};

void print_row(const Row& r, double copy_gbps) {
  const double gbps = r.bytes / (r.ms * 1e-3) / 1e9;
  std::printf("%-44s %9.1f us %8.2f GB %9.1f GB/s %6.1f%%\n", r.name, r.ms * 1e3, r.bytes / 1e9,
              gbps, 100.0 * gbps / copy_gbps);
}

int run(int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  cudaDeviceProp prop{};
  ECO_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs, L2 %.0f MB; weight %lld x %lld (%.1f M elements)\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize / 1e6, (long long)rows, (long long)cols,
              n / 1e6);

  // Copy bandwidth on 1 GiB (far beyond the 50-60 MB L2), bytes read + written.
  const size_t copy_bytes = size_t(1) << 30;
  double copy_gbps = 0;
  {
    DeviceBuffer src(copy_bytes), dst(copy_bytes);
    ECO_CHECK_CUDA(cudaMemset(src.get(), 1, copy_bytes));
    const float ms = median_ms([&] {
      ECO_CHECK_CUDA(cudaMemcpyAsync(dst.get(), src.get(), copy_bytes, cudaMemcpyDeviceToDevice));
    });
    copy_gbps = 2.0 * copy_bytes / (ms * 1e-3) / 1e9;
    std::printf("%-44s %9.1f us %8.2f GB %9.1f GB/s %6.1f%%\n",
                "cudaMemcpy D2D 1 GiB (read + write)", ms * 1e3, 2.0 * copy_bytes / 1e9, copy_gbps,
                100.0);
  }

  // Weights ~ U(-0.05, 0.05) quantized per row to E4M3; grad ~ U(-0.01, 0.01); moments of a run
  // in progress. fp32 and bf16 copies of the moments.
  const size_t ne = size_t(n);
  DeviceBuffer w{ne * 4}, codes{ne}, scales{size_t(rows) * 4}, grad{ne * 4}, m{ne * 4}, v{ne * 4},
      m16{ne * 2}, v16{ne * 2},
      scratch{4 * size_t(quantized_update_scratch_floats(rows, cols, QFormat::INT4,
                                                         Granularity::PerTensor))};
  fill(w.get<float>(), n, 1, -0.05f, 0.05f);
  fill(grad.get<float>(), n, 2, -0.01f, 0.01f);
  fill(m.get<float>(), n, 3, -1e-3f, 1e-3f);
  fill(v.get<float>(), n, 4, 1e-8f, 1e-6f);
  to_bf16_bits<<<unsigned((n + 255) / 256), 256>>>(m16.get<uint16_t>(), m.get<float>(), n);
  to_bf16_bits<<<unsigned((n + 255) / 256), 256>>>(v16.get<uint16_t>(), v.get<float>(), n);
  ECO_CHECK_LAUNCH();
  ECO_CHECK_CUDA(quantize_rows(w.get<float>(), codes.get<uint8_t>(), scales.get<float>(), rows,
                               cols, QFormat::E4M3, Rounding::RTN, 7, 0, 0));
  ECO_CHECK_CUDA(cudaDeviceSynchronize());

  int64_t t = 0;  // the step counter runs on through every timed launch
  auto coeffs = [&] {
    ++t;
    return AdamWCoeffs{1e-3f,
                       0.9f,
                       0.98f,
                       1e-9f,
                       0.1f,
                       1.0f,
                       float(1.0 - std::pow(0.9, double(t))),
                       float(1.0 - std::pow(0.98, double(t)))};
  };
  const double row_scale_bytes = 8.0 * double(rows);
  auto adamw_e4m3 = [&](Rounding r, auto* mm, auto* vv) {
    return median_ms([&] {
      const AdamWCoeffs c = coeffs();
      const FormatQuantizer q{QFormat::E4M3, r, 42, uint64_t(t), 1};
      using S = std::remove_pointer_t<decltype(mm)>;
      const QuantizedUpdateBuffers<S> b{codes.get<uint8_t>(), nullptr, grad.get<float>(), mm, vv};
      ECO_CHECK_CUDA(quantized_adamw_update(c, q, UpdatePolicy::Eco, b, scales.get<float>(), rows,
                                            cols, Granularity::PerRow, nullptr));
    });
  };
  std::vector<Row> table;
  table.push_back({"ECO AdamW E4M3 per-row SR, fp32 m/v",
                   adamw_e4m3(Rounding::SR, m.get<float>(), v.get<float>()),
                   22.0 * double(n) + row_scale_bytes});
  table.push_back({"ECO AdamW E4M3 per-row RTN, fp32 m/v",
                   adamw_e4m3(Rounding::RTN, m.get<float>(), v.get<float>()),
                   22.0 * double(n) + row_scale_bytes});
  table.push_back({"ECO AdamW E4M3 per-row SR, bf16 m/v",
                   adamw_e4m3(Rounding::SR, m16.get<uint16_t>(), v16.get<uint16_t>()),
                   14.0 * double(n) + row_scale_bytes});

  // SGDM (no v, less math): codes 2 B, grad 4, m 8 -> 14 B.
  table.push_back({"ECO SGDM E4M3 per-row SR, fp32 m", median_ms([&] {
                     ++t;
                     const FormatQuantizer q{QFormat::E4M3, Rounding::SR, 42, uint64_t(t), 1};
                     const QuantizedUpdateBuffers<float> b{
                         codes.get<uint8_t>(), nullptr, grad.get<float>(), m.get<float>(), nullptr};
                     ECO_CHECK_CUDA(quantized_sgdm_update(
                         {1e-2f, 0.9f, 0.1f, 1.0f}, q, UpdatePolicy::Eco, b, scales.get<float>(),
                         rows, cols, Granularity::PerRow, nullptr));
                   }),
                   14.0 * double(n) + row_scale_bytes});

  // INT4 per tensor, fp32 m/v: codes 0.5 B read + 0.5 B written per element.
  // Start codes: INT4 quantized per row (same packing as per tensor); scales[0] is the start scale.
  ECO_CHECK_CUDA(quantize_rows(w.get<float>(), codes.get<uint8_t>(), scales.get<float>(), rows,
                               cols, QFormat::INT4, Rounding::RTN, 7, 0, 0));
  table.push_back({"ECO AdamW INT4 per-tensor SR, fp32 m/v", median_ms([&] {
                     const AdamWCoeffs c = coeffs();
                     const FormatQuantizer q{QFormat::INT4, Rounding::SR, 42, uint64_t(t), 1};
                     const QuantizedUpdateBuffers<float> b{codes.get<uint8_t>(), nullptr,
                                                           grad.get<float>(), m.get<float>(),
                                                           v.get<float>()};
                     ECO_CHECK_CUDA(quantized_adamw_update(
                         c, q, UpdatePolicy::Eco, b, scales.get<float>(), rows, cols,
                         Granularity::PerTensor, scratch.get<float>()));
                   }),
                   21.0 * double(n)});

  // Plain fp32 AdamW on the same number of elements (param r/w, grad r, m r/w, v r/w: 28 B).
  table.push_back({"plain fp32 AdamW (reference element-wise)", median_ms([&] {
                     ECO_CHECK_CUDA(fp32_adamw_update(w.get<float>(), grad.get<float>(),
                                                      m.get<float>(), v.get<float>(), n, coeffs()));
                   }),
                   28.0 * double(n)});
  ECO_CHECK_CUDA(cudaDeviceSynchronize());

  for (const Row& r : table) print_row(r, copy_gbps);
  const double frac = table[0].bytes / (table[0].ms * 1e-3) / 1e9 / copy_gbps;
  std::printf(
      "headline (ECO AdamW E4M3 per-row SR, fp32 m/v): %.1f%% of copy bandwidth (target >= 70%%): "
      "%s\n",
      100.0 * frac, frac >= 0.7 ? "MET" : "NOT MET");
  return 0;
}

}  // namespace
}  // namespace eco::cuda

int main(int argc, char** argv) {
  try {
    const int64_t rows = argc > 2 ? std::atoll(argv[1]) : 8192;
    const int64_t cols = argc > 2 ? std::atoll(argv[2]) : 8192;
    if (rows < 1 || cols < 2 || cols % 2 != 0) {
      std::fprintf(stderr, "usage: eco-update-bench [rows cols] (rows >= 1, cols even >= 2)\n");
      return 2;
    }
    return eco::cuda::run(rows, cols);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eco-update-bench: %s\n", e.what());
    return 1;
  }
}
