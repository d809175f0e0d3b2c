// The whole model on the CUDA backend against the CPU reference backend, from identical weights
// and data: one forward + backward (every block family: gpt2, llama, gemma3), and 20 training
// steps under each precision treatment the GPU runs first; then the trainer end to end on the GPU
// (checkpoint, resume, samples). Host code only (the CUDA backend is behind base/backend.h), so it is a .cpp
// compiled by the host compiler.
//
// Tolerances (norm-wise relative error, gputest::rel_err; NaN/inf never pass):
//  - Loss after one forward: 1e-2 relative. The CUDA backend stores every activation in bf16
//    (unit roundoff 2^-9: ~2e-3 norm-wise per rounding) where the reference keeps fp32; a 2-layer
//    forward rounds ~15 times along any path, and most of that is averaged away in the mean
//    loss (observed scale ~1e-3), so 1e-2 leaves room for nothing but bf16 storage.
//  - Logits and every parameter gradient: 3e-2. The backward adds ~20 more bf16 roundings (the
//    activation gradients are bf16 too, dlogits included) on top of the forward's, and a
//    parameter gradient is a sum over 128 tokens of products of two such quantities; relative
//    errors of ~1e-2 are expected for the smallest gradients (norm gains, biases). A wrong term
//    (a missing accumulate, a transposed operand) gives O(1).
//  - 20 training steps: every step's loss within 2e-2 relative. The trajectories start equal and
//    drift apart: Adam's first steps are ~lr * sign(g), so gradient components that are mostly
//    rounding noise get different updates on the two backends, and FP8 codes near a rounding
//    boundary flip to the neighbouring code (a 6% jump of one weight) when the masters differ
//    in the last bits. Each such difference moves the loss only to second order; 2e-2
//    (~0.07 nats at the start) bounds the drift over 20 steps while a broken update rule (a
//    wrong ECO injection, a stale scale) separates the curves by more within a few steps.
//    Under the fp8-* treatments every block linear of this model (N = 128 tokens; C, 3C, H, 2H
//    multiples of 16) runs its forward as the FP8 GEMM on sm_90+ (Backend::quantized_linear_
//    forward): exact E4M3 products, fp32 accumulation, one bf16 rounding of the output. That is
//    closer to the CPU's fp32 emulation than the bf16 GEMM on bf16-rounded dequantized weights it
//    replaces (2^-9 more error per weight), and the dominant drift sources above (bf16 activation
//    storage flipping activation codes at E4M3 boundaries, sign-like first Adam steps) are
//    unchanged, so the same 2e-2 applies. The trainer test's B = 1 sampling forward (N not a
//    multiple of 16) takes the emulation, so both paths run there.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/rng.h"
#include "data/loader.h"
#include "gpu_test.h"
#include "base/backend.h"
#include "model/transformer.h"
#include "model_run.h"
#include "optim/optimizer.h"
#include "base/treatment.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace eco {
namespace {

using gputest::rel_err;

constexpr double kLossTol = 1e-2;
constexpr double kGradTol = 3e-2;
constexpr double kTrainLossTol = 2e-2;
constexpr int kB = 4;

// 2 layers, d 64, 4 heads, vocab 97, seq 32: the family defaults resolve the rest.
Config tiny(const std::string& family, const std::string& treatment = "fp32") {
  return parse_config("model: {family: " + family +
                          ", n_layer: 2, n_head: 4, d_model: 64, vocab_size: 97, seq_len: 32}\n"
                          "data: {source: synthetic}\n"
                          "optim: {lr: 3.0e-3, warmup_steps: 2, weight_decay: 0.1}\n"
                          "train: {batch_size: 4, max_steps: 20}\n"
                          "precision: {treatment: " + treatment + "}\n",
                      "test_model_gpu");
}

// A tiny Gemma 3 (configs/gemma3-tiny-cpu.yaml's structure): 2 layers, d 64, 4 query heads on 1
// kv head of 32 (head_dim is not d_model / n_head), window 8 < seq 32 in layer 0 (pattern 2:
// layer 1 is global), QK-norm, GeGLU, (1 + w) sandwich norms, scaled tied embeddings.
Config tiny_gemma3(const std::string& treatment = "fp32") {
  return parse_config("model: {family: gemma3, n_layer: 2, n_head: 4, n_kv_head: 1, head_dim: 32,"
                      " d_model: 64, mlp_hidden: 128, vocab_size: 97, seq_len: 32,"
                      " sliding_window: 8, sliding_window_pattern: 2, query_pre_attn_scalar: 32}\n"
                      "data: {source: synthetic}\n"
                      "optim: {lr: 3.0e-3, warmup_steps: 2, weight_decay: 0.1}\n"
                      "train: {batch_size: 4, max_steps: 20}\n"
                      "precision: {treatment: " + treatment + "}\n",
                      "test_model_gpu");
}

std::vector<int32_t> random_tokens(size_t n, int V, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(r.next_u64() % uint64_t(V));
  return t;
}

void check_forward_backward(const Config& c, const std::string& family) {
  ModelRun cpu = make_run(make_cpu_backend(), c);
  ModelRun gpu = make_run(make_cuda_backend(), c);
  const int T = c.model.seq_len, V = c.model.vocab_size, N = kB * T;
  const auto in = random_tokens(size_t(N), V, 11), tgt = random_tokens(size_t(N), V, 12);

  // The first N rows' V logits (CUDA pads vocab 97's rows to stride 128; the padding is zero).
  const auto logits = [&](ModelRun& r) {
    const int64_t ld = r.model->logits_stride();
    const auto all = to_host_floats(*r.be, r.model->forward_logits(in.data(), kB, T).slice(0, {N, ld}));
    std::vector<float> out;
    for (int n = 0; n < N; ++n) {
      out.insert(out.end(), all.begin() + n * ld, all.begin() + n * ld + V);
      for (int64_t j = V; j < ld; ++j) EXPECT_EQ(all[size_t(n * ld + j)], 0.0f) << n << ", " << j;
    }
    return out;
  };
  const double logit_err = rel_err(logits(gpu), logits(cpu));
  std::printf("  %s: logits rel_err %.2e\n", family.c_str(), logit_err);
  EXPECT_LE(logit_err, kGradTol) << family << " logits";

  cpu.model->zero_grad();
  gpu.model->zero_grad();
  const double l_cpu = cpu.model->forward_backward(in.data(), tgt.data(), kB, T, 1.0f);
  const double l_gpu = gpu.model->forward_backward(in.data(), tgt.data(), kB, T, 1.0f);
  std::printf("  %s: loss cpu %.6f gpu %.6f (rel %.2e)\n", family.c_str(), l_cpu, l_gpu,
              std::abs(l_gpu - l_cpu) / l_cpu);
  EXPECT_TRUE(std::isfinite(l_gpu));
  EXPECT_LE(std::abs(l_gpu - l_cpu), kLossTol * l_cpu) << family;

  const auto& specs = cpu.model->table().specs;
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < specs.size(); ++i) {
    const double e = rel_err(to_host_floats(*gpu.be, gpu.model->grad(i)),
                             to_host_floats(*cpu.be, cpu.model->grad(i)));
    EXPECT_LE(e, kGradTol) << family << " gradient of " << specs[i].name;
    if (!(e <= worst)) {
      worst = e;
      worst_name = specs[i].name;
    }
  }
  std::printf("  %s: worst parameter gradient rel_err %.2e (%s) over %zu tensors\n",
              family.c_str(), worst, worst_name.c_str(), specs.size());
}

TEST(GpuModel, Gpt2ForwardBackwardMatchesCpu) {
  ECO_REQUIRE_GPU();
  check_forward_backward(tiny("gpt2"), "gpt2");
}

TEST(GpuModel, LlamaForwardBackwardMatchesCpu) {
  ECO_REQUIRE_GPU();
  check_forward_backward(tiny("llama"), "llama");
}

// Grouped-query attention with a window and its own query scalar, QK-norm, GeGLU, (1 + w) norms
// before and after each half, embeddings times sqrt(d): the same tolerances (the extra norms add
// a few bf16 roundings along each path, far inside them).
TEST(GpuModel, Gemma3ForwardBackwardMatchesCpu) {
  ECO_REQUIRE_GPU();
  check_forward_backward(tiny_gemma3(), "gemma3");
}

// `label`'s losses on both backends over the config's steps: each within kTrainLossTol of the
// CPU's, and the GPU run learning.
void check_training(const Config& c, const std::string& label) {
  const int steps = int(c.total_steps());
  ModelRun cpu = make_run(make_cpu_backend(), c);
  ModelRun gpu = make_run(make_cuda_backend(), c);
  const auto l_cpu = train(cpu, c, steps), l_gpu = train(gpu, c, steps);
  double worst = 0;
  for (int s = 0; s < steps; ++s) {
    const double rel = std::abs(l_gpu[s] - l_cpu[s]) / l_cpu[s];
    worst = std::isfinite(rel) ? std::max(worst, rel) : INFINITY;
    EXPECT_LE(rel, kTrainLossTol) << label << " step " << s + 1 << ": cpu " << l_cpu[s]
                                  << " gpu " << l_gpu[s];
  }
  std::printf("  %-20s loss cpu %.4f -> %.4f, gpu %.4f -> %.4f, worst step rel %.2e\n",
              label.c_str(), l_cpu.front(), l_cpu.back(), l_gpu.front(), l_gpu.back(), worst);
  EXPECT_LT(l_gpu.back(), l_gpu.front() - 0.1) << label << " did not learn";
}

void check_training(const std::string& family, const std::string& treatment) {
  check_training(tiny(family, treatment), family + " " + treatment);
}

const char* const kTreatments[] = {"bf16-mw", "fp8-mw-rtn", "fp8-naive-rtn", "fp8-eco-sr"};

TEST(GpuModel, Gpt2TrainingFollowsCpuUnderEachTreatment) {
  ECO_REQUIRE_GPU();
  for (const char* t : kTreatments) check_training("gpt2", t);
}

TEST(GpuModel, LlamaTrainingFollowsCpuUnderEachTreatment) {
  ECO_REQUIRE_GPU();
  for (const char* t : kTreatments) check_training("llama", t);
}

TEST(GpuModel, Gemma3TrainingFollowsCpuUnderEachTreatment) {
  ECO_REQUIRE_GPU();
  for (const char* t : kTreatments) check_training(tiny_gemma3(t), std::string("gemma3 ") + t);
}

// A sparse MoE on both backends: 2 layers of 8 experts (hidden 128), top-2, only the
// experts quantized (the paper's SMoE), each router mode once, one with a shared expert and
// SwiGLU experts, one with a capacity that drops tokens (its dispatch runs on the host). The
// expert segments are padded to 16 rows on CUDA (whole FP8 tiles), not on the CPU.
Config tiny_moe(const std::string& family, const std::string& treatment, const std::string& moe) {
  return parse_config("model: {family: " + family +
                          ", n_layer: 2, n_head: 4, d_model: 64, vocab_size: 97, seq_len: 32,\n"
                          "  moe: {n_experts: 8, top_k: 2, expert_hidden: 128, aux_loss_coef: "
                          "0.01, z_loss_coef: 0.001" + moe + "}}\n"
                          "data: {source: synthetic}\n"
                          "optim: {lr: 3.0e-3, warmup_steps: 2, weight_decay: 0.1}\n"
                          "train: {batch_size: 4, max_steps: 20}\n"
                          "precision: {treatment: " + treatment + ", quantize: experts}\n",
                      "test_model_gpu");
}

void check_moe_training(const std::string& family, const std::string& treatment,
                        const std::string& moe) {
  check_training(tiny_moe(family, treatment, moe), "smoe " + family + " " + treatment + moe);
}

TEST(GpuModel, SmoeTrainingFollowsCpu) {
  ECO_REQUIRE_GPU();
  for (const char* t : {"bf16-mw", "fp8-naive-rtn", "fp8-eco-sr"})
    check_moe_training("gpt2", t, ", router: topk_softmax");
  check_moe_training("llama", "fp8-eco-sr",
                     ", router: softmax_topk, norm_topk: true, n_shared_experts: 1, "
                     "expert_act: swiglu");
  check_moe_training("gpt2", "fp8-eco-sr", ", router: sigmoid_bias, bias_update_rate: 0.001");
  check_moe_training("gpt2", "fp8-eco-sr", ", capacity_factor: 1.0");
}

// Two identical GPU runs give identical losses, bit for bit (no races, no atomics in any sum).
TEST(GpuModel, TrainingIsBitReproducible) {
  ECO_REQUIRE_GPU();
  const Config c = tiny("llama", "fp8-eco-sr");
  ModelRun a = make_run(make_cuda_backend(), c);
  ModelRun b = make_run(make_cuda_backend(), c);
  EXPECT_EQ(train(a, c, 5), train(b, c, 5));
}

// The trainer end to end on the GPU (device: cuda, tiny config, FP8 ECO with SR): a run with a
// mid-run checkpoint, evaluation and text samples (the B = 1 forward), then a run resumed from
// that checkpoint in a fresh directory: the final checkpoints are identical, section by section.
TEST(GpuModel, TrainerRunsOnCudaAndResumesBitExactly) {
  ECO_REQUIRE_GPU();
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("eco-gpu-trainer-" + std::to_string(getpid()));
  fs::remove_all(dir);
  Config c = parse_config(
      "device: cuda\n"
      "model: {family: llama, n_layer: 2, n_head: 4, d_model: 64, vocab_size: 97, seq_len: 32}\n"
      "data: {source: synthetic}\n"
      "precision: {treatment: fp8-eco-sr}\n"
      "train: {batch_size: 4, max_steps: 6, checkpoint_interval: 3, keep_checkpoints: 5,"
      " log_interval: 1, eval_batches: 2, sample_tokens: 8}\n",
      "test_model_gpu");
  c.train.out_dir = (dir / "full").string();
  {
    Trainer t(c);
    ASSERT_EQ(t.run(RunOptions{}), 0);
  }
  fs::create_directories(dir / "resumed");
  fs::copy_file(dir / "full" / checkpoint_name(3), dir / "resumed" / checkpoint_name(3));
  c.train.out_dir = (dir / "resumed").string();
  {
    Trainer t(c);
    RunOptions resume;
    resume.resume = true;
    ASSERT_EQ(t.run(resume), 0);
  }
  const CheckpointState a = load_checkpoint((dir / "full" / checkpoint_name(6)).string());
  const CheckpointState b = load_checkpoint((dir / "resumed" / checkpoint_name(6)).string());
  ASSERT_EQ(a.sections.size(), b.sections.size());
  for (size_t i = 0; i < a.sections.size(); ++i) {
    EXPECT_EQ(a.sections[i].first, b.sections[i].first);
    EXPECT_TRUE(a.sections[i].second == b.sections[i].second)
        << "final checkpoint section " << a.sections[i].first << " differs";
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace eco
