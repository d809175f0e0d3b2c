// eco-update-bench: bandwidth of the fused quantized-weight update (kernels/cuda/
// optimizer_update.cuh) against a device-to-device copy measured in the same run.
//
// Bytes counted: the minimum the update must move, each input read once and each output written
// once, per element (plus 8 B per row: the scale read and written):
//   ECO / naive AdamW, E4M3, fp32 m, v: read grad 4, m 4, v 4, code 1; write m 4, v 4, code 1: 22 B
//   the same with bf16 m, v: 14 B;   ECO SGDM, fp32 m: read grad 4, m 4, code 1; write m 4, code 1: 14 B
//   ECO AdamW INT4 per tensor, fp32 m, v: 21 B (half a code byte each way; its scratch not counted)
//   plain fp32 AdamW (the master-weight optimizer step, the reference): param, m, v read and
//   written, grad read: 28 B.
// A kernel that moves more (the two-pass kernel re-reads codes, m and v in pass 2) is still
// charged the minimum, so its GB/s is the useful rate, not the bus's.
// The copy: cudaMemcpy of 1 GiB, counted as bytes read + written.
//
// Timing: CUDA events around back-to-back launches, median of kRepeats after a warm-up. Small
// tensors (GPT-2's fit in the 50-60 MB L2) rotate over several copies of their buffers, at least
// kRotationBytes in all, so that every launch streams from DRAM like the optimizer step does;
// the time per launch is the batch's over its launches. Each launch is a new step (new SR draws).
// Sections: every GPT-2 124M quantized shape (weights are (out, in) = (rows, cols) row-major, one
// scale per row) and one large square under the treatments' update rules; the GPT-2 124M
// optimizer step (its 48 quantized tensors back to back); the kernel choices (GroupKernel) at
// each shape. The headline (fp8-eco-sr, fp32 m/v) is judged against >= 70% of the copy.
//
// What bounds it (an H200, the register kernel at 4 elements per thread, in the form before the
// per-element changes of the next paragraph): not the bytes. The copy ran at 4.20 TB/s and the
// plain fp32 AdamW at 3.1-4.2 TB/s (75-100%), but fp8-eco-sr AdamW at 1.59 TB/s (37.9% on
// 8192x8192, 37.0% over GPT-2's 48 tensors), fp8-eco-rtn at 2.30 TB/s (54.8%), and bf16 moments
// (14 B instead of 22) took as long as fp32 ones. Nsight Compute on the 2304x768 SR update: 287
// SASS instructions per element, issue slots 73% busy, DRAM 20% busy. The H200 issues ~3.3e13
// thread-instructions/s, so 70% of the copy (137 G elements/s) allows at most ~245 per element at a
// perfect 100% issue rate. Per element the shared math costs, from the SASS: 4 IEEE divisions and a
// sqrt (~50 with their range checks), the E4M3 decode twice and the SR encode (~60, 64-bit shifts
// and branches), and Philox-4x32-10 (~85: per round two 32x32->64 multiplies, two 3-way xors, plus
// an add of zero per multiply and the key schedule recomputed per element, which the compiler does
// not hoist out of the codec's per-element branches). Reaching 70% needs that shared code
// (src/base/math/philox.h, qformat.h) made cheaper for the compiler, bit for bit, which is outside
// this kernel.
// The kernel here (the same bits; static SASS of the sm_90a kernel, scripts/dev/sass_count.sh; not
// timed on a GPU): one Philox call per 4 elements with a precomputed key schedule (~13 instructions
// per element), a branch-free E4M3 codec (SR encode 18, decode 8), the step's uniform terms and the
// row's scale computed once, 32-bit column math, a 4-shuffle team max; and, at late steps (both
// bias corrections 1: the "late step" rows), kernels without the two bias-correction divisions.
// Straight-line instructions per element (no division slow path), 4 / 16 elements per thread:
// 178 / 165 (329 / 290 in the form measured above), 155 / 141 at late steps. What remains: four
// IEEE divisions and a sqrt (~45, bit-exact only as they are) and the reloads of kernel parameters
// around them.
// Usage: eco-update-bench [square]   (the large square's side, default 8192)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "base/math/eco_update.h"
#include "base/math/format_quantizer.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/optimizer_update.cuh"
#include "kernels/cuda/quantize.cuh"

namespace eco::cuda {
namespace {

constexpr int kRepeats = 15;
constexpr double kRotationBytes = 512e6;  // >= 8x the L2

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

// One quantized weight's update buffers: E4M3 codes per row (INT4 for the per-tensor row), grad,
// fp32 and bf16 moments, and the fp32 weight (the plain AdamW's parameter, the codes' source).
struct WeightSet {
  int64_t rows, cols;
  DeviceBuffer w, codes, scales, grad, m, v, m16, v16, scratch;
  WeightSet(int64_t r, int64_t c, uint32_t seed)
      : rows(r), cols(c), w(size_t(r * c) * 4), codes(size_t(r * c)), scales(size_t(r) * 4),
        grad(size_t(r * c) * 4), m(size_t(r * c) * 4), v(size_t(r * c) * 4),
        m16(size_t(r * c) * 2), v16(size_t(r * c) * 2),
        scratch(4 * size_t(quantized_update_scratch_floats(r, c, QFormat::INT4,
                                                           Granularity::PerTensor))) {
    const int64_t n = r * c;
    fill(w.get<float>(), n, seed + 1, -0.05f, 0.05f);
    fill(grad.get<float>(), n, seed + 2, -0.01f, 0.01f);
    fill(m.get<float>(), n, seed + 3, -1e-3f, 1e-3f);
    fill(v.get<float>(), n, seed + 4, 1e-8f, 1e-6f);
    to_bf16_bits<<<unsigned((n + 255) / 256), 256>>>(m16.get<uint16_t>(), m.get<float>(), n);
    to_bf16_bits<<<unsigned((n + 255) / 256), 256>>>(v16.get<uint16_t>(), v.get<float>(), n);
    ECO_CHECK_LAUNCH();
    requantize(QFormat::E4M3);
  }
  // Codes (and scales) from the fp32 weight, per row, RTN.
  void requantize(QFormat f) {
    ECO_CHECK_CUDA(quantize_rows(w.get<float>(), codes.get<uint8_t>(), scales.get<float>(), rows,
                                 cols, f, Rounding::RTN, 7, 0, 0));
  }
};

// Copies of one shape's buffers, enough to stream from DRAM on every launch.
std::vector<WeightSet> make_sets(int64_t rows, int64_t cols, uint32_t seed) {
  const double set_bytes = 35.0 * double(rows * cols);  // what a WeightSet holds per element
  const int sets = std::max(2, int(std::ceil(kRotationBytes / set_bytes)));
  std::vector<WeightSet> v;
  v.reserve(size_t(sets));
  for (int i = 0; i < sets; ++i) v.emplace_back(rows, cols, seed + 100 * uint32_t(i));
  ECO_CHECK_CUDA(cudaDeviceSynchronize());
  return v;
}

// Median milliseconds per launch of launch(i), i over [0, launches), timed as one batch per
// repeat after one warm-up batch.
template <class F>
double ms_per_launch(int launches, F&& launch) {
  cudaEvent_t start, stop;
  ECO_CHECK_CUDA(cudaEventCreate(&start));
  ECO_CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < launches; ++i) launch(i);
  std::vector<float> ms(kRepeats);
  for (auto& t : ms) {
    ECO_CHECK_CUDA(cudaEventRecord(start));
    for (int i = 0; i < launches; ++i) launch(i);
    ECO_CHECK_CUDA(cudaEventRecord(stop));
    ECO_CHECK_CUDA(cudaEventSynchronize(stop));
    ECO_CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
  }
  ECO_CHECK_CUDA(cudaEventDestroy(start));
  ECO_CHECK_CUDA(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return double(ms[kRepeats / 2]) / launches;
}

struct Result {
  std::string name, shape;
  double bytes_per_elem, elems, rows, ms;
  double gbps() const { return (bytes_per_elem * elems + 8.0 * rows) / (ms * 1e-3) / 1e9; }
};

void print_header(const char* title) {
  std::printf("\n%s\n%-44s %-18s %5s %10s %9s %7s\n", title, "update", "shape", "B/el",
              "us/launch", "GB/s", "copy%");
}
void print(const Result& r, double copy_gbps) {
  std::printf("%-44s %-18s %5.1f %10.1f %9.1f %6.1f%%\n", r.name.c_str(), r.shape.c_str(),
              r.bytes_per_elem, r.ms * 1e3, r.gbps(), 100.0 * r.gbps() / copy_gbps);
}

// The step counter runs on through every launch, so SR draws differ from launch to launch. The
// bias corrections are those of an early step (t <= 100, bc1 and bc2 below 1), or with `late`
// those of a late one (both 1, as from step ~860 of a run at betas 0.9 / 0.98: the kernels
// without the two bias-correction divisions, AdamWRule::unbiased()), whatever the launch count.
struct Stepper {
  int64_t t = 0;
  bool late = false;
  RuleStep adamw() {
    ++t;
    const double tb = late ? 1e6 : double(std::min<int64_t>(t, 100));
    return RuleStep{RuleKind::AdamW, 1e-3f, 0.9f, 0.98f, 1e-9f, 0.1f, 1.0f,
                    float(1.0 - std::pow(0.9, tb)), float(1.0 - std::pow(0.98, tb))};
  }
  FormatQuantizer quantizer(QFormat f, Rounding r) {
    return FormatQuantizer{f, r, 42, uint64_t(t), 1};
  }
};

enum class State { F32, BF16 };

// One AdamW update of set s under `policy`, E4M3 (per row unless told), fp32 or bf16 moments.
void adamw_row_update(Stepper& st, WeightSet& s, UpdatePolicy policy, Rounding r, State state,
                      GroupKernel kernel = GroupKernel::Auto,
                      Granularity g = Granularity::PerRow) {
  const RuleStep c = st.adamw();
  const FormatQuantizer q = st.quantizer(QFormat::E4M3, r);
  if (state == State::F32) {
    const QuantizedUpdateBuffers<float> b{s.codes.get<uint8_t>(), nullptr, s.grad.get<float>(),
                                          s.m.get<float>(), s.v.get<float>()};
    ECO_CHECK_CUDA(quantized_update(c, q, policy, b, s.scales.get<float>(), s.rows, s.cols, g,
                                    nullptr, nullptr, kernel));
  } else {
    const QuantizedUpdateBuffers<uint16_t> b{s.codes.get<uint8_t>(), nullptr, s.grad.get<float>(),
                                             s.m16.get<uint16_t>(), s.v16.get<uint16_t>()};
    ECO_CHECK_CUDA(quantized_update(c, q, policy, b, s.scales.get<float>(), s.rows, s.cols, g,
                                    nullptr, nullptr, kernel));
  }
}

std::string shape_name(int64_t rows, int64_t cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

// The treatments' updates at one shape; the headline row first.
std::vector<Result> shape_rows(const char* what, int64_t rows, int64_t cols, bool extras) {
  std::vector<WeightSet> sets = make_sets(rows, cols, uint32_t(rows * 7 + cols));
  const int n_sets = int(sets.size());
  const double n = double(rows * cols), nr = double(rows);
  const std::string shape = shape_name(rows, cols);
  Stepper st;
  std::vector<Result> out;
  auto add = [&](std::string name, double bytes, double rows_counted, auto&& launch) {
    out.push_back({std::string(what) + " " + name, shape, bytes, n, rows_counted,
                   ms_per_launch(n_sets, launch)});
  };
  add("fp8-eco-sr AdamW", 22, nr, [&](int i) {
    adamw_row_update(st, sets[size_t(i)], UpdatePolicy::Eco, Rounding::SR, State::F32);
  });
  Stepper late{0, true};
  add("fp8-eco-sr AdamW, late step", 22, nr, [&](int i) {
    adamw_row_update(late, sets[size_t(i)], UpdatePolicy::Eco, Rounding::SR, State::F32);
  });
  add("fp8-eco-rtn AdamW", 22, nr, [&](int i) {
    adamw_row_update(st, sets[size_t(i)], UpdatePolicy::Eco, Rounding::RTN, State::F32);
  });
  add("fp8-naive-sr AdamW", 22, nr, [&](int i) {
    adamw_row_update(st, sets[size_t(i)], UpdatePolicy::Naive, Rounding::SR, State::F32);
  });
  add("fp32 master AdamW (plain)", 28, 0, [&](int i) {
    WeightSet& s = sets[size_t(i)];
    ECO_CHECK_CUDA(fp32_plain_update(s.w.get<float>(), s.grad.get<float>(), s.m.get<float>(),
                                     s.v.get<float>(), rows * cols, st.adamw()));
  });
  if (!extras) return out;
  add("fp8-eco-sr AdamW, bf16 m/v", 14, nr, [&](int i) {
    adamw_row_update(st, sets[size_t(i)], UpdatePolicy::Eco, Rounding::SR, State::BF16);
  });
  add("fp8-eco-sr SGDM", 14, nr, [&](int i) {
    WeightSet& s = sets[size_t(i)];
    ++st.t;
    const QuantizedUpdateBuffers<float> b{s.codes.get<uint8_t>(), nullptr, s.grad.get<float>(),
                                          s.m.get<float>(), nullptr};
    ECO_CHECK_CUDA(quantized_update(sgdm_step(1e-2f, 0.9f, 0.1f, 1.0f),
                                    st.quantizer(QFormat::E4M3, Rounding::SR), UpdatePolicy::Eco,
                                    b, s.scales.get<float>(), rows, cols, Granularity::PerRow,
                                    nullptr));
  });
  for (WeightSet& s : sets) s.requantize(QFormat::INT4);  // same packing as per tensor
  add("int4-eco-sr AdamW per tensor", 21, 0, [&](int i) {
    WeightSet& s = sets[size_t(i)];
    const RuleStep c = st.adamw();
    const QuantizedUpdateBuffers<float> b{s.codes.get<uint8_t>(), nullptr, s.grad.get<float>(),
                                          s.m.get<float>(), s.v.get<float>()};
    ECO_CHECK_CUDA(quantized_update(c, st.quantizer(QFormat::INT4, Rounding::SR),
                                    UpdatePolicy::Eco, b, s.scales.get<float>(), rows, cols,
                                    Granularity::PerTensor, s.scratch.get<float>()));
  });
  return out;
}

// fp8-eco-sr AdamW (fp32 m/v) at one shape under every GroupKernel that fits it; PerRow scales,
// or Block128 (the scales buffer holds rows floats, more than the tiles need).
std::vector<Result> kernel_rows(int64_t rows, int64_t cols, Granularity g = Granularity::PerRow) {
  std::vector<WeightSet> sets = make_sets(rows, cols, uint32_t(rows * 5 + cols));
  const std::string shape =
      shape_name(rows, cols) + (g == Granularity::Block128 ? " 128x128" : "");
  const double scale_rows = double(scale_group_count(g, rows, cols));
  Stepper st;
  std::vector<Result> out;
  const std::pair<GroupKernel, const char*> kernels[] = {
      {GroupKernel::Auto, "auto"},          {GroupKernel::Registers4, "registers, 4/thread"},
      {GroupKernel::Registers8, "registers, 8/thread"},
      {GroupKernel::Registers16, "registers, 16/thread"}, {GroupKernel::TwoPass, "two-pass"}};
  for (auto [kernel, name] : kernels) {
    if (!group_kernel_fits(kernel, g, rows, cols)) continue;
    out.push_back({std::string("fp8-eco-sr AdamW, ") + name, shape, 22, double(rows * cols),
                   scale_rows, ms_per_launch(int(sets.size()), [&](int i) {
                     adamw_row_update(st, sets[size_t(i)], UpdatePolicy::Eco, Rounding::SR,
                                      State::F32, kernel, g);
                   })});
  }
  return out;
}

// GPT-2 124M's quantized weights, (rows, cols) = (out, in) as src/model/param_table.cpp lays
// them out: attn.qkv (3C, C), attn.proj (C, C), mlp.fc (4C, C), mlp.proj (C, 4C).
constexpr int64_t kC = 768, kLayers = 12;
const std::pair<const char*, std::pair<int64_t, int64_t>> kGpt2Shapes[] = {
    {"qkv", {3 * kC, kC}}, {"attn.proj", {kC, kC}}, {"fc", {4 * kC, kC}}, {"mlp.proj", {kC, 4 * kC}}};

// The whole GPT-2 124M quantized update of one step: 48 tensors back to back, E4M3 per row,
// fp32 m/v (85M elements, 1.9 GB of minimal traffic: far beyond L2 without rotation).
std::vector<WeightSet> gpt2_tensors() {
  std::vector<WeightSet> tensors;
  tensors.reserve(size_t(4 * kLayers));
  for (int64_t l = 0; l < kLayers; ++l)
    for (const auto& [what, shape] : kGpt2Shapes)
      tensors.emplace_back(shape.first, shape.second, uint32_t(1000 + tensors.size()));
  ECO_CHECK_CUDA(cudaDeviceSynchronize());
  return tensors;
}

Result gpt2_step(std::vector<WeightSet>& tensors, UpdatePolicy policy, Rounding r,
                 const char* name, bool late = false) {
  double elems = 0, rows = 0;
  for (const WeightSet& s : tensors) elems += double(s.rows * s.cols), rows += double(s.rows);
  Stepper st{0, late};
  const double ms = ms_per_launch(1, [&](int) {
    for (WeightSet& s : tensors) adamw_row_update(st, s, policy, r, State::F32);
  });
  return {name, "48 tensors", 22, elems, rows, ms};
}

int run(int64_t square) {
  cudaDeviceProp prop{};
  ECO_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs, L2 %.0f MB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize / 1e6);

  // Copy bandwidth on 1 GiB (far beyond the L2), bytes read + written.
  const size_t copy_bytes = size_t(1) << 30;
  double copy_gbps = 0;
  {
    DeviceBuffer src(copy_bytes), dst(copy_bytes);
    ECO_CHECK_CUDA(cudaMemset(src.get(), 1, copy_bytes));
    const double ms = ms_per_launch(1, [&](int) {
      ECO_CHECK_CUDA(cudaMemcpyAsync(dst.get(), src.get(), copy_bytes, cudaMemcpyDeviceToDevice));
    });
    copy_gbps = 2.0 * double(copy_bytes) / (ms * 1e-3) / 1e9;
    std::printf("copy: cudaMemcpy D2D 1 GiB, %.1f us, %.1f GB/s (read + write) = 100%%\n",
                ms * 1e3, copy_gbps);
  }

  print_header("== per shape (GPT-2 124M quantized weights, rotating copies; one large square)");
  std::vector<Result> all;
  auto keep = [&](const std::vector<Result>& rows) {
    for (const Result& r : rows) {
      print(r, copy_gbps);
      all.push_back(r);
    }
  };
  for (const auto& [what, shape] : kGpt2Shapes) keep(shape_rows(what, shape.first, shape.second, false));
  keep(shape_rows("square", square, square, true));

  print_header("== GPT-2 124M optimizer step, all 48 quantized tensors");
  Result step_sr, step_sr_late;
  {
    std::vector<WeightSet> tensors = gpt2_tensors();
    step_sr = gpt2_step(tensors, UpdatePolicy::Eco, Rounding::SR, "fp8-eco-sr AdamW");
    print(step_sr, copy_gbps);
    step_sr_late = gpt2_step(tensors, UpdatePolicy::Eco, Rounding::SR,
                             "fp8-eco-sr AdamW, late step", true);
    print(step_sr_late, copy_gbps);
    print(gpt2_step(tensors, UpdatePolicy::Eco, Rounding::RTN, "fp8-eco-rtn AdamW"), copy_gbps);
    print(gpt2_step(tensors, UpdatePolicy::Naive, Rounding::SR, "fp8-naive-sr AdamW"), copy_gbps);
  }

  print_header("== kernel choice (GroupKernel), fp8-eco-sr AdamW, fp32 m/v");
  for (const auto& [what, shape] : kGpt2Shapes)
    for (const Result& r : kernel_rows(shape.first, shape.second)) print(r, copy_gbps);
  for (const Result& r : kernel_rows(square, square)) print(r, copy_gbps);
  for (const Result& r : kernel_rows(square, square, Granularity::Block128)) print(r, copy_gbps);
  ECO_CHECK_CUDA(cudaDeviceSynchronize());

  // Headlines: fp8-eco-sr AdamW with fp32 moments, the large square and the GPT-2 step, at an
  // early and a late step (bias corrections below 1 / equal to 1).
  const Result *sq = nullptr, *sq_late = nullptr;
  for (const Result& r : all) {
    if (r.shape != shape_name(square, square)) continue;
    if (r.name == "square fp8-eco-sr AdamW") sq = &r;
    if (r.name == "square fp8-eco-sr AdamW, late step") sq_late = &r;
  }
  std::printf("\n");
  const std::pair<const Result*, const char*> headlines[] = {
      {sq, "early"}, {sq_late, "late"}, {&step_sr, "early"}, {&step_sr_late, "late"}};
  for (auto [r, when] : headlines) {
    if (!r) continue;
    const double frac = r->gbps() / copy_gbps;
    std::printf("headline fp8-eco-sr AdamW %-10s %-5s step (22 B/element minimal): %7.1f GB/s = "
                "%5.1f%% of copy (target >= 70%%): %s\n",
                r->shape.c_str(), when, r->gbps(), 100.0 * frac, frac >= 0.7 ? "MET" : "NOT MET");
  }
  return 0;
}

}  // namespace
}  // namespace eco::cuda

int main(int argc, char** argv) {
  try {
    const int64_t square = argc > 1 ? std::atoll(argv[1]) : 8192;
    if (square < 2 || square % 2 != 0 || square > 32768) {
      std::fprintf(stderr, "usage: eco-update-bench [square] (even, 2..32768)\n");
      return 2;
    }
    return eco::cuda::run(square);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eco-update-bench: %s\n", e.what());
    return 1;
  }
}
