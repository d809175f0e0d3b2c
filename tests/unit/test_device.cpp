// device: cuda where it cannot run: the trainer refuses with one clear usage error that says why
// (this build has no CUDA backend, or no CUDA GPU is visible); --plan works for either device.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "core/config.h"
#include "base/error.h"
#include "base/backend.h"
#include "model/transformer.h"
#include "train/trainer.h"

namespace eco {
namespace {

Config tiny(const std::string& device) {
  return parse_config("device: " + device +
                          "\nmodel: {n_layer: 1, n_head: 2, d_model: 16, vocab_size: 32, seq_len: 8}"
                          "\ndata: {source: synthetic}\ntrain: {batch_size: 2, max_steps: 1}\n",
                      "cfg.yaml");
}

TEST(Device, CudaIsRefusedWithTheReasonWhereItCannotRun) {
  try {
    Trainer t(tiny("cuda"));
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage) << e.what();
#if defined(ECO_HAVE_CUDA)
    EXPECT_NE(std::string(e.what()).find("device: cuda but no CUDA GPU is visible"),
              std::string::npos)
        << e.what();
#else
    EXPECT_NE(std::string(e.what()).find(
                  "this build has no CUDA backend (ECO_CUDA=OFF or nvcc not found)"),
              std::string::npos)
        << e.what();
#endif
    return;
  }
#if !defined(ECO_HAVE_CUDA)
  FAIL() << "a build without the CUDA backend made a CUDA trainer";
#else
  GTEST_SKIP() << "a CUDA GPU is visible: the CUDA backend was made";
#endif
}

// The CUDA plan keeps the same static memory (weights, state) but bf16 activations and an
// attention state of (B, NH, T) instead of (B, NH, T, T).
TEST(Device, CudaPlanHasBf16ActivationsAndTheSameStaticMemory) {
  const Config c = tiny("cpu");
  auto cpu = make_planning_backend(Device::Cpu);
  auto gpu = make_planning_backend(Device::Cuda);
  Transformer a(c.model, *cpu, c.train.batch_size);
  Transformer b(c.model, *gpu, c.train.batch_size);
  EXPECT_EQ(cpu->ledger().static_bytes(), gpu->ledger().static_bytes());
  EXPECT_EQ(cpu->ledger().total(MemCategory::Grads), gpu->ledger().total(MemCategory::Grads));
  EXPECT_LT(gpu->ledger().total(MemCategory::Activations),
            cpu->ledger().total(MemCategory::Activations) * 0.6);
  EXPECT_NE(plan_report(tiny("cuda")).find("static bytes per parameter"), std::string::npos);
}

// The CUDA plan includes the CUDA backend's workspaces for the model's shapes, recomputed here
// from their definitions (kernels/cuda/workspace_plan.h documents them): GPT-2's shape, whose
// vocabulary (50257) gets padded logits rows and a padded bf16 head weight, under an FP8
// treatment; none on the CPU.
TEST(Device, CudaPlanReservesTheCudaWorkspacesOfTheModelShapes) {
  ModelConfig m;
  m.set_family(ModelFamily::Gpt2);
  m.n_layer = 1;
  m.n_head = 12;
  m.d_model = 768;
  m.vocab_size = 50257;
  m.seq_len = 1024;
  m.mlp_hidden = 3072;
  const int B = 2;
  const int64_t N = int64_t(B) * 1024;
  auto bytes_of = [](const Backend& be, const std::string& name) {
    uint64_t b = 0;
    for (const auto& e : be.ledger().entries())
      if (e.name == name) b += e.bytes;
    return b;
  };
  auto gpu = make_planning_backend(Device::Cuda);
  Transformer model(m, *gpu, B, treatment_from_name("fp8-eco-sr"));
  const uint64_t ld = 1024, elems = 12 * 1024 * ld;  // NH * T * (T rounded up to 8)
  EXPECT_EQ(bytes_of(*gpu, "attention scores (GEMM path)"), 4 * elems + 2 * elems);
  // The logits rows are padded in place (stride 50304), with no separate padded copy.
  EXPECT_EQ(bytes_of(*gpu, "logits"), 2ull * N * 50304);
  EXPECT_EQ(bytes_of(*gpu, "padded logits / dlogits for the head GEMMs"), 0u);
  EXPECT_EQ(bytes_of(*gpu, "bf16 weight for the GEMMs"), 2ull * 50304 * 768);
  EXPECT_EQ(bytes_of(*gpu, "FP8 activation codes + scales"), uint64_t(N) * 3072 + 4 * N);
  EXPECT_EQ(bytes_of(*gpu, "cublaslt workspace"), 32ull << 20);

  auto cpu = make_planning_backend(Device::Cpu);
  Transformer on_cpu(m, *cpu, B, treatment_from_name("fp8-eco-sr"));
  EXPECT_EQ(bytes_of(*cpu, "attention scores (GEMM path)"), 0u);
  EXPECT_EQ(bytes_of(*cpu, "logits"), 4ull * N * 50257);
  EXPECT_EQ(bytes_of(*cpu, "cublaslt workspace"), 0u);
}

// The plan follows ECO_CUDA_ATTENTION as the CUDA backend does: the GEMM path's score scratch is
// planned unless the mma path is requested and takes the model's shapes (hs 64 here; not hs 8).
TEST(Device, CudaPlanLeavesOutTheScoreScratchWhenTheMmaPathRuns) {
  const char* old = std::getenv("ECO_CUDA_ATTENTION");
  const std::string saved = old ? old : "";
  auto scores = [](int d_model, const char* request) {
    setenv("ECO_CUDA_ATTENTION", request, 1);
    ModelConfig m;
    m.n_layer = 1;
    m.n_head = 2;
    m.d_model = d_model;
    m.vocab_size = 64;
    m.seq_len = 64;
    m.mlp_hidden = 4 * d_model;  // what load_config resolves 0 to for gpt2
    auto gpu = make_planning_backend(Device::Cuda);
    Transformer model(m, *gpu, 2);
    uint64_t b = 0;
    for (const auto& e : gpu->ledger().entries())
      if (e.name == "attention scores (GEMM path)") b += e.bytes;
    return b;
  };
  const uint64_t gemm = 2 * 64 * 64 * (4 + 2);  // NH * T * ld, fp32 S and bf16 P
  EXPECT_EQ(scores(128, "auto"), gemm);
  EXPECT_EQ(scores(128, "gemm"), gemm);
  EXPECT_EQ(scores(128, "mma"), 0u);
  EXPECT_EQ(scores(16, "mma"), 2u * 64 * 64 * (4 + 2));  // hs 8: mma cannot, gemm can
  if (old)
    setenv("ECO_CUDA_ATTENTION", saved.c_str(), 1);
  else
    unsetenv("ECO_CUDA_ATTENTION");
}

// The CUDA plan is an sm_90 plan; under an FP8 treatment it notes sm_89's fp32 accumulator of
// the row-scaled FP8 forward: N * widest OC * 4 bytes = 2048 * 3072 * 4 = 24 MiB here.
TEST(Device, CudaPlanNotesTheSm89Fp32AccumulatorOfFp8Treatments) {
  const std::string model =
      "\nmodel: {n_layer: 1, n_head: 12, d_model: 768, vocab_size: 256, seq_len: 1024}"
      "\ndata: {source: synthetic}\ntrain: {batch_size: 2, max_steps: 1}\n";
  const std::string note = "on sm_89 GPUs the FP8 forward also reserves an fp32 accumulator of";
  const std::string fp8 = plan_report(
      parse_config("device: cuda\nprecision: {treatment: fp8-eco-sr}" + model, "cfg.yaml"));
  EXPECT_NE(fp8.find(note + " 24.0 MiB"), std::string::npos) << fp8;
  const std::string bf16 = plan_report(
      parse_config("device: cuda\nprecision: {treatment: bf16-mw}" + model, "cfg.yaml"));
  EXPECT_EQ(bf16.find(note), std::string::npos) << bf16;
  const std::string cpu = plan_report(
      parse_config("device: cpu\nprecision: {treatment: fp8-eco-sr}" + model, "cfg.yaml"));
  EXPECT_EQ(cpu.find(note), std::string::npos) << cpu;
}

}  // namespace
}  // namespace eco
