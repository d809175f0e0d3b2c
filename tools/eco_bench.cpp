// eco-bench: training-step speed of a config on this machine, against the BLAS ceiling
// measured in the same run (device: cpu) or the GPU's dense bf16 peak (device: cuda).
//   eco-bench CONFIG.yaml [--set key=value]... [--steps N] [--warmup N]
// Reports the median ms/step, tokens/s, achieved GFLOP/s (6 x params x tokens + attention)
// and (cpu) the BLAS's sgemm GFLOP/s on the model's largest GEMM shape, checked against two
// references that do not trust that BLAS: the FMA peak from the CPU's features and clock, and
// our own packed sgemm on the same shape (tools/cpu_ceiling.h); or (cuda) the model FLOPs
// utilisation against 989 TFLOP/s, the H100/H200 SXM dense bf16 datasheet peak.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/cpu_share.h"
#include "base/error.h"
#include "core/rng.h"
#include "kernels/cpu/blas_runtime.h"
#include "kernels/cpu/thread_runtime.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "base/treatment.h"
#include "tools/cpu_ceiling.h"

namespace {

using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// sgemm GFLOP/s for (M, N, K) = rows x out x in, as the forward matmul calls it: the linked
// BLAS, or (reference) our own kernel on the same operands.
double sgemm_gflops(int M, int N, int K, const eco::cpu::CpuFeatures* reference) {
  std::vector<float> a(size_t(M) * K, 0.01f), b(size_t(N) * K, 0.02f), c(size_t(M) * N);
  std::vector<double> times;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = clock_type::now();
    if (reference) {
      if (!eco::tools::reference_sgemm_nt(*reference, M, N, K, a.data(), b.data(), c.data())) return 0;
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(),
                  K, 0.0f, c.data(), N);
    }
    times.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return 2.0 * M * N * K / median(times) / 1e9;
}

int run(int argc, char** argv) {
  std::string path;
  std::vector<std::string> overrides;
  int steps = 10, warmup = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--set" && i + 1 < argc) overrides.push_back(argv[++i]);
    else if (a == "--steps" && i + 1 < argc) steps = std::stoi(argv[++i]);
    else if (a == "--warmup" && i + 1 < argc) warmup = std::stoi(argv[++i]);
    else if (a[0] != '-' && path.empty()) path = a;
    else eco::usage_error("usage: eco-bench CONFIG.yaml [--set k=v]... [--steps N] [--warmup N]");
  }
  if (path.empty()) eco::usage_error("usage: eco-bench CONFIG.yaml [--set k=v]... [--steps N]");
  const eco::Config cfg = eco::load_config(path, overrides);
  std::string auto_note;
  if (cfg.train.threads == eco::TrainConfig::kThreadsAuto)
    omp_set_num_threads(eco::measure_auto_threads(1, 0.2, &auto_note));
  else if (cfg.train.threads > 0)
    omp_set_num_threads(cfg.train.threads);
  const auto& m = cfg.model;
  const int B = cfg.train.batch_size, T = m.seq_len;
  auto be = eco::make_backend(cfg.device);
  eco::Transformer model(m, *be, B, cfg.precision.treatment);
  eco::Optimizer opt(cfg.optim, model, cfg.train.seed);
  model.init_weights(cfg.train.seed);
  eco::Rng rng(cfg.train.seed);
  std::vector<int32_t> in(size_t(B) * T), tgt(in.size());
  for (auto& t : in) t = int32_t(rng.next_u64() % uint64_t(m.vocab_size));
  for (auto& t : tgt) t = int32_t(rng.next_u64() % uint64_t(m.vocab_size));

  std::printf("eco-bench: %s  (%s, %d layers, d %d, %d heads, vocab %d, B %d, T %d, %lld params, "
              "%lld active, %s backend, %s, %d threads)\n",
              path.c_str(), eco::enum_name(m.family), m.n_layer, m.d_model, m.n_head, m.vocab_size, B, T,
              (long long)model.table().total, (long long)model.table().active, be->name().c_str(),
              cfg.precision.treatment.name.c_str(), omp_get_max_threads());
  if (cfg.device != eco::Device::Cuda) {
    std::printf("BLAS: %s\n", eco::cpu::blas_summary_line().c_str());
    std::printf("OpenMP waits: %s\n", eco::cpu::omp_wait_summary_line().c_str());
    if (!auto_note.empty()) std::printf("threads: auto: %s\n", auto_note.c_str());
  }
  std::vector<double> ms;
  for (int s = 0; s < warmup + steps; ++s) {
    const auto t0 = clock_type::now();
    model.zero_grad();
    model.forward_backward(in.data(), tgt.data(), B, T, 1.0f);
    opt.step(1e-4, opt.grad_norm());
    be->synchronize();
    const double dt = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    if (s >= warmup) ms.push_back(dt);
    std::printf("  step %2d: %8.1f ms%s\n", s + 1, dt, s < warmup ? "  (warm-up)" : "");
  }
  const double med = median(ms);
  const double tokens = double(B) * T;
  // Training FLOPs: 6 per parameter per token (forward + backward) for the matmul weights a
  // token passes through (an MoE's top_k experts, not all of them), plus attention's QK^T and
  // att@V: 6 * 2 * B * NH * T * T * hs / 2 (causal half ignored).
  const double matmul_params = double(model.table().active);
  const double flops = 6.0 * matmul_params * tokens + 12.0 * m.n_layer * B * double(T) * T * m.d_model;
  const double achieved = flops / (med / 1000.0) / 1e9;
  std::printf("\n%-34s %12s\n", "metric", "value");
  std::printf("%-34s %12.1f\n", "median ms/step", med);
  std::printf("%-34s %12.1f\n", "tokens/s", tokens / (med / 1000.0));
  std::printf("%-34s %12.1f\n", "achieved GFLOP/s", achieved);
  if (cfg.device == eco::Device::Cuda) {
    constexpr double kPeakGflops = 989e3;  // H100/H200 SXM dense bf16, datasheet
    std::printf("%-34s %12.3f\n", "MFU (of 989 TFLOP/s bf16)", achieved / kPeakGflops);
    return 0;
  }
  const int gm = B * T, gn = 4 * m.d_model, gk = m.d_model;
  const double ceiling = sgemm_gflops(gm, gn, gk, nullptr);
  std::printf("%-34s %12.1f\n", "sgemm GFLOP/s (same run, ceiling)", ceiling);
  std::printf("%-34s %12.2f\n", "fraction of sgemm ceiling", achieved / ceiling);
  // The ceiling itself, checked against references that do not go through the BLAS.
  const eco::cpu::CpuFeatures cpu = eco::cpu::detect_cpu_features();
  const int threads = omp_get_max_threads();
  const eco::tools::FmaPeak peak = eco::tools::fma_peak(cpu);
  const double peak_all = peak.gflops_per_thread * threads;
  const double own = sgemm_gflops(gm, gn, gk, &cpu);
  std::printf("\nceiling check, sgemm %d x %d x %d, %d threads:\n", gm, gn, gk, threads);
  std::printf("%-34s %12.1f  (%s)\n", "FMA peak GFLOP/s", peak_all, peak.how.c_str());
  std::printf("%-34s %12.1f  (%s)\n", "reference sgemm GFLOP/s", own,
              eco::tools::reference_sgemm_name(cpu).c_str());
  std::printf("%-34s %12.2f\n", "BLAS sgemm / FMA peak", ceiling / peak_all);
  if (own > 0) std::printf("%-34s %12.2f\n", "BLAS sgemm / reference sgemm", ceiling / own);
  // A tuned BLAS beats a plain packed kernel; one slower than it runs the wrong kernels.
  if (own > 0 && ceiling < 0.8 * own)
    std::printf("warning: the BLAS runs below our plain reference kernel: its core (%s) does not "
                "fit this CPU; try OPENBLAS_CORETYPE\n", eco::cpu::blas_info().core.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  eco::cpu::ensure_cpu_runtime(argv);  // may re-exec (BLAS core, OpenMP wait): before all else
  try {
    return run(argc, argv);
  } catch (const eco::Error& e) {
    std::fprintf(stderr, "eco-bench: error: %s\n", e.what());
    return e.exit_code();
  }
}
