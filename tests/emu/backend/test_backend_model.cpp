// The CUDA backend (kernels/cuda/cuda_backend.cpp) under the emulator, beside
// tests/gpu/test_model_gpu.cpp's forward / backward tests (run here as they are): training steps
// of a tiny GPT-2 (vocab 97: logits rows padded to 128, the head on padded rows) against the CPU
// backend, 3 under bf16-mw, 2 under fp8-eco-sr (every block linear's forward the FP8 GEMM: sm_90
// OUTER_VEC), 1 on sm_89 (its unit-scaled route), and what the
// emulator sees of the backend's host side: the FP8 forward GEMMs really run (cuBLASLt calls
// logged), NVTX ranges balanced, streams and events released, the profiler's event timing.
//
// Tolerance (as tests/gpu/test_model_gpu.cpp, which explains it): every step's loss within 2e-2
// relative of the CPU backend's; the emulated GEMMs are closer to the CPU's than the GPU's (one
// rounding of a float64 sum), so this only leaves room for bf16 activation storage.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nvtx3/nvToolsExt.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "data/loader.h"
#include "base/backend.h"
#include "model/transformer.h"
#include "model_run.h"
#include "optim/optimizer.h"
#include "base/treatment.h"
#include "sweep.h"

namespace eco {
namespace {

constexpr double kTrainLossTol = 2e-2;

// 2 layers, 2 heads of 16, vocab 97 (tests/gpu/test_model_gpu.cpp's tiny model has d 64, 4 heads
// and sequences of 32): one host thread per CUDA thread makes every row kernel slow, so sequences
// of 16; and the FP8 treatment quantizes its weights a block per weight row, so d 32 by default
// (sweep.h; ECO_EMU_FULL=1, label exhaustive: d 64 and 4 heads). Batch 2: N = B * T = 32 token
// rows, a multiple of 16 for the FP8 GEMMs (as d and 4d are), yet fast. (Sequences of 8 save
// little more and leave 3 bf16-mw steps' losses to the batches' noise: "did not learn".)
Config tiny(const std::string& treatment, int steps) {
  const std::string model = emuh::full_sweep()
                                ? "n_layer: 2, n_head: 4, d_model: 64, vocab_size: 97, seq_len: 16"
                                : "n_layer: 2, n_head: 2, d_model: 32, vocab_size: 97, seq_len: 16";
  return parse_config(
      "model: {family: gpt2, " + model + "}\n"
      "data: {source: synthetic}\n"
      "optim: {lr: 3.0e-3, warmup_steps: 2, weight_decay: 0.1}\n"
      "train: {batch_size: 2, max_steps: " +
          std::to_string(steps) +
          "}\n"
          "precision: {treatment: " +
          treatment + "}\n",
      "test_backend_model");
}



struct DeviceCc {
  int saved;
  explicit DeviceCc(int cc) : saved(emu::device_cc) { emu::device_cc = cc; }
  ~DeviceCc() { emu::device_cc = saved; }
};

// The FP8 GEMMs among the logged cuBLASLt calls, and their scale mode.
struct Fp8Calls {
  long n = 0, outer_vec = 0, scalar_into_f32 = 0;
};
Fp8Calls fp8_calls() {
  Fp8Calls f;
  for (const auto& c : emu::lt::calls)
    if (c.a_type == CUDA_R_8F_E4M3) {
      ++f.n;
      f.outer_vec += c.scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      f.scalar_into_f32 +=
          c.scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F && c.c_type == CUDA_R_32F;
    }
  return f;
}

// Every step's loss of the emulated CUDA run within kTrainLossTol of the CPU run's; the worst
// relative difference (inf for a non-finite loss).
double expect_losses_follow(const std::vector<double>& l_cpu, const std::vector<double>& l_gpu,
                            const std::string& what) {
  double worst = 0;
  for (size_t s = 0; s < l_cpu.size(); ++s) {
    const double rel = std::abs(l_gpu[s] - l_cpu[s]) / l_cpu[s];
    worst = std::isfinite(rel) ? std::max(worst, rel) : INFINITY;
    EXPECT_LE(rel, kTrainLossTol) << what << " step " << s + 1 << ": cpu " << l_cpu[s]
                                  << " emulated cuda " << l_gpu[s];
  }
  return worst;
}

void check_training(const std::string& treatment, int cc, int steps) {
  DeviceCc device(cc);
  const Config c = tiny(treatment, steps);
  ModelRun cpu = make_run(make_cpu_backend(), c);
  ModelRun gpu = make_run(make_cuda_backend(), c);
  emu::lt::reset_log();
  const auto l_cpu = train(cpu, c, steps), l_gpu = train(gpu, c, steps);
  const double worst = expect_losses_follow(l_cpu, l_gpu, treatment + " sm_" + std::to_string(cc));
  const Fp8Calls f = fp8_calls();
  std::printf(
      "[   emu    ] gpt2 %-11s sm_%d loss cpu %.4f -> %.4f, emulated cuda %.4f -> %.4f, worst "
      "step rel %.2e; %ld FP8 GEMMs (%ld OUTER_VEC, %ld unit-scaled into fp32)\n",
      treatment.c_str(), cc, l_cpu.front(), l_cpu.back(), l_gpu.front(), l_gpu.back(), worst, f.n,
      f.outer_vec, f.scalar_into_f32);
  // (From step 3 on: the warmup makes the first update tiny.)
  if (steps >= 3) {
    EXPECT_LT(l_gpu.back(), l_gpu.front()) << "did not learn";
  }
  // Every block linear's forward (qkv, attention projection, fc, fc projection: 4 per layer)
  // runs the FP8 GEMM under the fp8 treatments, in the architecture's form.
  // (sm_80 has no FP8: the backend runs the emulation the CPU runs, bf16 GEMMs on the
  // dequantized codes.)
  const long per_step = treatment.rfind("fp8", 0) == 0 && cc >= 89 ? 4 * 2 : 0;
  EXPECT_EQ(f.n, per_step * steps);
  EXPECT_EQ(f.outer_vec, cc >= 90 ? f.n : 0);
  EXPECT_EQ(f.scalar_into_f32, cc >= 90 ? 0 : f.n);
}

TEST(EmuCudaBackend, Gpt2Bf16MwTrainingFollowsCpu) { check_training("bf16-mw", 90, 3); }
TEST(EmuCudaBackend, Gpt2Fp8EcoSrTrainingFollowsCpuOnSm90) { check_training("fp8-eco-sr", 90, 2); }
// One step (its loss is the forward's, before any update): the architecture changes only the
// FP8 forward GEMM. (sm_80, no FP8, runs the emulation: check_training("fp8-eco-sr", 80, 1)
// passes too, left out of the suite for its time; GpuQuantizedLinear covers that fallback.)
TEST(EmuCudaBackend, Gpt2Fp8EcoSrTrainingFollowsCpuOnSm89) { check_training("fp8-eco-sr", 89, 1); }

// A sparse MoE on the emulated CUDA backend: 1 layer of 4 experts (hidden 32),
// top-2, only the experts quantized, fp8-eco-sr, 2 steps against the CPU backend. The router,
// dispatch, gather, combine and their backwards run the CUDA MoE kernels; the expert segments
// are padded to 16 rows, so every expert forward (fc and proj of each expert that got tokens)
// is an FP8 GEMM, and nothing else is (attention stays bf16 under quantize: experts).
TEST(EmuCudaBackend, SmoeFp8EcoSrTrainingFollowsCpu) {
  DeviceCc device(90);
  const int steps = 2, layers = 1, experts = 4;  // (2 layers: 31 s here, twice the time)
  const Config c = parse_config(
      "model: {family: gpt2, n_layer: 1, n_head: 2, d_model: 32, vocab_size: 97, seq_len: 16,\n"
      "  moe: {n_experts: 4, top_k: 2, expert_hidden: 32, n_shared_experts: 1,\n"
      "        aux_loss_coef: 0.01, z_loss_coef: 0.001}}\n"
      "data: {source: synthetic}\n"
      "optim: {lr: 3.0e-3, warmup_steps: 1, weight_decay: 0.1}\n"
      "train: {batch_size: 2, max_steps: 2}\n"
      "precision: {treatment: fp8-eco-sr, quantize: experts}\n",
      "test_backend_model");
  ModelRun cpu = make_run(make_cpu_backend(), c);
  ModelRun gpu = make_run(make_cuda_backend(), c);
  emu::lt::reset_log();
  const auto l_cpu = train(cpu, c, steps), l_gpu = train(gpu, c, steps);
  expect_losses_follow(l_cpu, l_gpu, "smoe");
  const Fp8Calls f = fp8_calls();
  std::printf("[   emu    ] smoe fp8-eco-sr sm_90 loss cpu %.4f -> %.4f, emulated cuda %.4f -> "
              "%.4f; %ld FP8 GEMMs\n",
              l_cpu.front(), l_cpu.back(), l_gpu.front(), l_gpu.back(), f.n);
  // Two per expert with tokens; at least one such expert per layer and step (the shared
  // expert's linears are quantized too: two more per layer and step).
  EXPECT_EQ(f.n % 2, 0);
  EXPECT_GE(f.n, long(steps) * layers * 2 * 2);
  EXPECT_LE(f.n, long(steps) * layers * 2 * (experts + 1));
  EXPECT_EQ(f.outer_vec, f.n);
}

// A tiny Gemma 3 on the emulated CUDA backend against the CPU backend: every kernel of the family
// (grouped-query attention with a window in layer 0 and its own query scalar, RoPE over
// grouped-query rows with the local and the global base, QK-norm, GeGLU, the (1 + w) gains' fp32
// add, the bf16 embedding scale) in the backend's order. 2 layers of d 32, 2 query heads on 1 kv
// head of 32, window 8 < seq 16 (pattern 2: layer 1 is global), batch 2: as the GPT-2 test's
// sizes. Steps as check_training's; the same 2e-2 tolerance. `attention`: ECO_CUDA_ATTENTION for
// the backend (flash by default; mma: the tensor-core path for hs 32).
void check_gemma3_training(const std::string& treatment, int steps, const char* attention) {
  DeviceCc device(90);
  const Config c = parse_config(
      "model: {family: gemma3, n_layer: 2, n_head: 2, n_kv_head: 1, head_dim: 32, d_model: 32,\n"
      "  mlp_hidden: 64, vocab_size: 97, seq_len: 16, sliding_window: 8,\n"
      "  sliding_window_pattern: 2, query_pre_attn_scalar: 24}\n"
      "data: {source: synthetic}\n"
      "optim: {lr: 3.0e-3, warmup_steps: 2, weight_decay: 0.1}\n"
      "train: {batch_size: 2, max_steps: " + std::to_string(steps) + "}\n"
      "precision: {treatment: " + treatment + "}\n",
      "test_backend_model");
  ModelRun cpu = make_run(make_cpu_backend(), c);
  setenv("ECO_CUDA_ATTENTION", attention, 1);  // read once, when the backend is made
  ModelRun gpu = make_run(make_cuda_backend(), c);
  unsetenv("ECO_CUDA_ATTENTION");
  emu::lt::reset_log();
  const auto l_cpu = train(cpu, c, steps), l_gpu = train(gpu, c, steps);
  const double worst = expect_losses_follow(l_cpu, l_gpu, "gemma3 " + treatment);
  const Fp8Calls f = fp8_calls();
  std::printf("[   emu    ] gemma3 %-11s %s attention: loss cpu %.4f -> %.4f, emulated cuda %.4f "
              "-> %.4f, worst step rel %.2e; %ld FP8 GEMMs\n",
              treatment.c_str(), attention, l_cpu.front(), l_cpu.back(), l_gpu.front(),
              l_gpu.back(), worst, f.n);
  if (steps >= 3) {
    EXPECT_LT(l_gpu.back(), l_gpu.front()) << "did not learn";
  }
  // qkv, proj, fc (GeGLU's gate and up) and fc projection of both layers: N 32, C 32, QKV 128,
  // attention width 64, FC 128, H 64, all multiples of 16: every one an FP8 GEMM.
  EXPECT_EQ(f.n, treatment.rfind("fp8", 0) == 0 ? long(4 * 2 * steps) : 0L);
}

TEST(EmuCudaBackend, Gemma3Bf16MwTrainingFollowsCpu) { check_gemma3_training("bf16-mw", 3, "auto"); }
TEST(EmuCudaBackend, Gemma3Fp8EcoSrTrainingOnTheMmaPathFollowsCpu) {
  check_gemma3_training("fp8-eco-sr", 2, "mma");
}

// The host side: every NVTX range popped, the streams (compute and side) and the events (the
// profiler's, side_fork's and side_join's) released with the backend, and the profile names the
// operations that ran.
TEST(EmuCudaBackend, ProfilesBalancesRangesAndReleasesStreamsAndEvents) {
  const long streams = emu::streams_alive, events = emu::events_alive;
  const long allocations = long(emu::allocations.size());
  {
    const Config c = tiny("bf16-mw", 1);
    ModelRun gpu = make_run(make_cuda_backend(), c);
    EXPECT_EQ(emu::streams_alive, streams + 2);
    gpu.be->set_profiling(true);
    const long pushes = emu::nvtx_pushes;
    train(gpu, c, 1);
    EXPECT_GT(emu::nvtx_pushes, pushes);
    EXPECT_EQ(emu::nvtx_depth, 0) << "unbalanced NVTX ranges";
    const auto prof = gpu.be->take_profile();
    for (size_t i = 0; i < prof.size() && i < 6; ++i)  // largest first: the emulator's costs
      std::printf("[   emu    ] %-32s %4lld calls %8.1f ms (emulated)\n", prof[i].name.c_str(),
                  static_cast<long long>(prof[i].calls), prof[i].ms);
    bool saw_attention = false, saw_matmul = false;
    for (const auto& op : prof) {
      saw_attention |= op.name == "attention_forward";
      saw_matmul |= op.name == "matmul_forward";
      EXPECT_GE(op.ms, 0.0) << op.name;
    }
    EXPECT_TRUE(saw_attention && saw_matmul) << prof.size() << " operations profiled";
  }
  EXPECT_EQ(emu::streams_alive, streams);
  EXPECT_EQ(emu::events_alive, events);
  EXPECT_EQ(long(emu::allocations.size()), allocations) << "device memory left allocated";
}

}  // namespace
}  // namespace eco
